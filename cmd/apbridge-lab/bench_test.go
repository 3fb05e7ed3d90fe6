package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// Bad bench flags are refused before anything starts, with the flag and
// what it accepts.
func TestBenchFlagErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "--runs: 0 is out of range (valid 1-1000)"},
		{[]string{"--rtt", "-1ms"}, "--rtt: -1ms is out of range (valid 0-10s)"},
		{[]string{"--grace", "10ms"}, "--grace: 10ms is out of range (valid 100ms-5m)"},
		{[]string{"--period", "2s"}, "--period: 2s is out of range"},
		{[]string{"--relay-memlimit", "40M"}, `--relay-memlimit: "40M" is not a GOMEMLIMIT`},
		{[]string{"ldm-swich"}, `unknown scenario "ldm-swich" (valid: ldm-none,`},
		{[]string{"--tags", "-5"}, "--tags: -5 is out of range (valid 1-20000)"},
		{[]string{"--server", "prosys"}, `--server: "prosys" is not valid (valid: embedded, node)`},
		{[]string{"--fleet", "soak"}, "--fleet needs --sink jetstream"},
		{[]string{"--handoff=false", "soak"}, "--handoff needs --fleet"},
		{[]string{"--standby-level", "251"}, "--standby-level: 251 is out of range (valid 0-250)"},
		{[]string{"--delay", "-1s"}, "--delay: -1s is out of range (valid 0-1m)"},
		{[]string{"--outage", "0s"}, "--outage: 0s is out of range (valid 1s-24h)"},
		{[]string{"--wan", "drop"}, `--wan: "drop" is not valid (valid: cut, freeze, none)`},
		{[]string{"--flap", "1s"}, "--flap: 1s is out of range (valid 10s-24h)"},
		{[]string{"--wan-rtt", "-1ms"}, "--wan-rtt: -1ms is out of range (valid 0-10s)"},
		{[]string{"--hub", "remote"}, `--hub: "remote" is not valid (valid: process, inline)`},
		{[]string{"--catchup-rate", "1000"}, "--catchup-rate: 1000 is out of range (valid 0, or 1000000-10000000000 bits/s)"},
		{[]string{"--hz", "0"}, "--hz: 0 is out of range (valid 1-50)"},
		{[]string{"--site", "remote"}, `--site: "remote" is not valid (valid: process, inline)`},
		{[]string{"--leaf-compression", "gzip"}, `--leaf-compression: "gzip" is not valid (valid: off, s2_uncompressed, s2_fast, s2_better, s2_best, s2_auto)`},
		{[]string{"--hub", "inline"}, "--site process (the default) needs --hub process; with --hub inline give --site inline"},
		{[]string{"--hub-nice", "20"}, "--hub-nice: 20 is out of range (valid 0-19)"},
		{[]string{"--dup-window", "500ms"}, "--dup-window: 500ms is out of range (valid 0, or 1s-24h)"},
		// A flag after a scenario's name is read as a flag.
		{[]string{"relay-restart", "--runs", "0"}, "--runs: 0 is out of range (valid 1-1000)"},
		{[]string{"relay-restart", "--runs", "2", "ldm-swich"}, `unknown scenario "ldm-swich"`},
	}
	for _, c := range cases {
		err := runBench(context.Background(), c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
	// The control: a valid memory limit passes validation (-list then exits
	// before any scenario runs).
	for _, args := range [][]string{{"--relay-memlimit", "40MiB", "-list"}, {"--fleet", "--sink", "jetstream", "-list"}, {"--fleet", "--sink", "jetstream", "--handoff=false", "-list"}, {"--outage", "2h", "--wan", "freeze", "-list"}, {"--wan", "none", "-list"}, {"--leaf-compression", "s2_auto", "-list"}, {"--hub-nice", "0", "--dup-window", "30s", "--site", "inline", "-list"}, {"--hub", "inline", "--site", "inline", "-list"}, {"relay-restart", "--runs", "10", "-list"}} {
		if err := runBench(context.Background(), args, io.Discard, io.Discard); err != nil {
			t.Fatalf("valid flags %v refused: %v", args, err)
		}
	}
}
