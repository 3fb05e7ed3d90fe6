package main

import (
	"context"

	"github.com/rs/zerolog"
)

// reloadHook returns what a reload request runs: SIGHUP, and a Windows
// service's parameter-change control. It is called from the main loop
// (serve.go), so it must return within the watchdog timeout; path is the
// config file the relay was started with, r the running relay.
//
// This build has no live reload: the hook says so, and the relay runs on
// with the configuration it started with.
func reloadHook(path string, r *running, log zerolog.Logger) func(ctx context.Context) error {
	return func(context.Context) error {
		log.Warn().Str("config", path).Msg("live reload is not available in this build: the relay runs on with the configuration it started with (restart it to apply a change)")
		return nil
	}
}
