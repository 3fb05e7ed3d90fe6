//go:build !race

package uaserver

const opcuaRaceEnabled = false
