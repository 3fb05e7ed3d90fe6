package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/apbridge/apbridge/relay"
)

// notifyReload returns the channel SIGHUP arrives on, caught from now on
// (its default action would end the process), and the function that
// stops catching it.
func notifyReload() (<-chan os.Signal, func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// reload re-reads the config file and applies it to the running relay
// (relay.Relay.ApplyYAML): a file with a problem, or with a change only a
// restart applies, is logged and changes nothing.
func (r *running) reload(ctx context.Context, path string) {
	rl := r.relay.Load()
	if rl == nil {
		return
	}
	r.log.Info().Str("config", path).Msg("SIGHUP: re-reading the config")
	data, err := relay.ReadFile(path)
	if err != nil {
		r.log.Warn().Str("config", path).Err(err).Msg("config not applied")
		return
	}
	// ApplyYAML logs the outcome: "config applied" or "config not
	// applied" with every problem.
	rl.ApplyYAML(ctx, data, relay.Origin{Via: "sighup"}, 0)
}
