//go:build race

package testcluster

const opcuaRaceEnabled = true
