package main

import (
	"context"
	"time"

	"github.com/apbridge/apbridge/relay"
	"github.com/rs/zerolog"
)

// reloadHook returns what a reload request runs: SIGHUP, and a Windows
// service's parameter-change control. It re-reads the config file the
// relay was started with (path) and applies it to the running relay
// (relay.Relay.ApplyYAML): a file with a problem, or with a change only a
// restart applies, is logged and changes nothing. It runs in the main
// loop (serve.go), so the watchdog's pings wait for it: a reload that
// never returns is a hung relay, and systemd restarts it. So the change
// waits for no more than wait (the loop's period, half the watchdog
// timeout at most) for what its sources do: tags removed at a source busy
// with a subscribe (a wedged gateway holds one for its command timeout)
// are removed after the reload returned.
func reloadHook(path string, r *running, log zerolog.Logger, wait time.Duration) func(ctx context.Context, trigger string) error {
	return func(ctx context.Context, trigger string) error {
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		rl := r.relay.Load()
		if rl == nil {
			return nil
		}
		log.Info().Str("config", path).Str("trigger", trigger).Msg("re-reading the config")
		data, err := relay.ReadFile(path)
		if err != nil {
			log.Warn().Str("config", path).Err(err).Msg("config not applied")
			return nil
		}
		// ApplyYAML logs a change: "config applied", or "config not
		// applied" with every problem. A file that changes nothing is
		// said here, or the operator would hear nothing back.
		a, err := rl.ApplyYAML(ctx, data, relay.Origin{Via: viaOf(trigger)}, 0)
		if err == nil && a.Plan.Empty() {
			log.Info().Str("config", path).Uint64("version", a.Version).Msg("config unchanged")
		}
		return nil
	}
}

// viaOf names a reload's trigger for the audit line.
func viaOf(trigger string) string {
	if trigger == "SIGHUP" {
		return "sighup"
	}
	return "service control" // a Windows service's parameter change
}
