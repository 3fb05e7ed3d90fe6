package mxsim

import (
	"time"

	"github.com/apbridge/apbridge/testcluster/internal/option"
	"github.com/rs/zerolog"
)

// Option configures Start, in nats.go's style: it sets a field of the
// gateway's configuration, or returns an error that Start returns before
// it starts anything. The gateway's own settings, which a test changes
// while it runs, have Set methods instead.
type Option func(*config) error

// config is what the Options set.
type config struct {
	option.Common
}

// newConfig applies opts to the defaults (see option.Apply).
func newConfig(opts []Option) (config, error) {
	cfg := config{Common: option.Common{Logger: zerolog.Nop(), ReadyWait: 10 * time.Second}}
	err := option.Apply(&cfg, opts)
	return cfg, err
}

// WithLogger sends the gateway's log lines to l (default: no logging): it
// logs sessions at Debug, faults and lifecycle at Info.
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error { c.Logger = l; return nil }
}

// WithReadyTimeout bounds how long Restart waits for the gateway's port
// to be free again (default 10 s).
func WithReadyTimeout(d time.Duration) Option {
	return func(c *config) error { return c.SetReadyTimeout("mxsim", d) }
}
