package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/procstat"
	"github.com/apbridge/apbridge/relay"
	"github.com/rs/zerolog"
)

// soakRelayStats is what the soak's relay process reports when asked:
// its own memory and goroutines, measured after a GC, and where its
// connections are, so that the soak can aim its faults and wait for the
// relay to be whole again.
type soakRelayStats struct {
	Goroutines  int                  `json:"goroutines"`
	RSSMiB      float64              `json:"rss_mib"`
	HeapMiB     float64              `json:"heap_mib"`
	NATSActive  string               `json:"nats_active"`  // server ID, "" if none
	NATSPassive string               `json:"nats_passive"` // server ID, "" if none
	Sources     []bridge.SourceStats `json:"sources"`
	Ready       bool                 `json:"ready"`
	Why         []string             `json:"why,omitempty"`
	// Owned are the sources whose lease a fleet relay holds, and Fleet its
	// member's counters.
	Owned  []string     `json:"owned,omitempty"`
	Fleet  *fleet.Stats `json:"fleet,omitempty"`
	Fenced uint64       `json:"fenced,omitempty"`
	// StreamFenced are the updates its JetStream sink kept out because a
	// newer owner stores the tag.
	StreamFenced uint64 `json:"stream_fenced,omitempty"`
}

// runSoakRelay is the relay process of the soak scenario: `apbridge run`
// as a site runs it (relay.Load, relay.Start), alone in its process so
// that its memory and goroutines are its own. It prints "ready" once
// started, then answers each "stats" line on stdin with one JSON line
// (after a GC) and ends on "stop" or at the end of its input. It is not a
// user command.
func runSoakRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("soak-relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the relay's config file")
	verbose := fs.Bool("v", false, "log to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := relay.Load(*path)
	if err != nil {
		return err
	}
	log := zerolog.Nop()
	if *verbose {
		log = zerolog.New(stderr).With().Timestamp().Logger().Level(zerolog.InfoLevel)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	rl, err := relay.Start(sctx, c, relay.WithLogger(log))
	cancel()
	if err != nil {
		return err
	}
	defer rl.Close()
	fmt.Fprintln(stdout, "ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch strings.TrimSpace(in.Text()) {
		case "stats", "state":
			b, err := json.Marshal(relayStats(rl, in.Text() == "stats"))
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, string(b))
		case "stop":
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return rl.Shutdown(dctx)
		}
	}
	return in.Err()
}

// relayStats reports the relay; with memory, after a GC and with the freed
// memory given back, so that the figures compare between calls.
func relayStats(rl *relay.Relay, memory bool) soakRelayStats {
	var st soakRelayStats
	if memory {
		debug.FreeOSMemory() // a GC, and what it freed given back
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		st.RSSMiB, st.HeapMiB = procstat.CurrentRSS(), float64(ms.HeapInuse)/(1<<20)
	}
	st.Goroutines, st.Sources = runtime.NumGoroutine(), rl.Bridge().Stats()
	if a, ok := rl.Conn().ActiveServer(); ok {
		st.NATSActive = a.ID
	}
	if p, ok := rl.Conn().PassiveServer(); ok {
		st.NATSPassive = p.ID
	}
	st.Ready, st.Why = rl.Ready()
	if m := rl.Fleet(); m != nil {
		st.Owned = m.Owned()
		fs := m.Stats()
		st.Fleet, st.Fenced = &fs, rl.FleetFenced()
	}
	if js := rl.JetStream(); js != nil {
		st.StreamFenced = js.Stats().Fenced
	}
	return st
}
