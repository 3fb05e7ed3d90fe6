// Package option holds what the functional options of the test server
// packages (natstest, uaserver, mxsim) share: the loop that applies them,
// and the settings that more than one server has, so that an option of the
// same name checks its value and words its error alike in every package.
package option

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// Apply applies opts to c in order and stops at the first error. A nil
// option is skipped, as nats.go does, so that callers can build lists with
// optional entries.
func Apply[C any, O ~func(*C) error](c *C, opts []O) error {
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(c); err != nil {
			return err
		}
	}
	return nil
}

// Common is what every test server's configuration has; each package's
// configuration embeds it.
type Common struct {
	// Logger receives the server's log lines (WithLogger).
	Logger zerolog.Logger
	// ReadyWait bounds how long a start or a Restart waits for readiness
	// (WithReadyTimeout).
	ReadyWait time.Duration
}

// SetReadyTimeout is WithReadyTimeout of package pkg: d must be positive.
func (c *Common) SetReadyTimeout(pkg string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s: WithReadyTimeout(%v): the timeout must be positive", pkg, d)
	}
	c.ReadyWait = d
	return nil
}

// Latency is what the configuration of servers behind fault proxies has.
type Latency struct {
	// Delay is the one-way latency the proxies add: half the client
	// round-trip time (WithClientRTT).
	Delay time.Duration
}

// SetClientRTT is WithClientRTT of package pkg: rtt cannot be negative.
func (l *Latency) SetClientRTT(pkg string, rtt time.Duration) error {
	if rtt < 0 {
		return fmt.Errorf("%s: WithClientRTT(%v): a round-trip time cannot be negative", pkg, rtt)
	}
	l.Delay = rtt / 2
	return nil
}
