//go:build race

package uaserver

const opcuaRaceEnabled = true
