package mxsim

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// Option configures Start, in nats.go's style: it sets a field of the
// gateway's configuration, or returns an error that Start returns before
// it starts anything. The gateway's own settings, which a test changes
// while it runs, have Set methods instead.
type Option func(*config) error

// config is what the Options set.
type config struct {
	logger    zerolog.Logger
	readyWait time.Duration
}

// newConfig applies opts to the defaults, in order, and stops at the first
// error. A nil Option is skipped, as nats.go does, so that callers can
// build lists with optional entries.
func newConfig(opts []Option) (config, error) {
	cfg := config{logger: zerolog.Nop(), readyWait: 10 * time.Second}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// WithLogger sends the gateway's log lines to l (default: no logging): it
// logs sessions at Debug, faults and lifecycle at Info.
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error {
		c.logger = l
		return nil
	}
}

// WithReadyTimeout bounds how long Restart waits for the gateway's port
// to be free again (default 10 s).
func WithReadyTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("mxsim: WithReadyTimeout(%v): the timeout must be positive", d)
		}
		c.readyWait = d
		return nil
	}
}
