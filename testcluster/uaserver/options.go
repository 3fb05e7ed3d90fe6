package uaserver

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/testcluster/internal/option"
	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// Option configures StartPair, in nats.go's style: it sets a field of the
// pair's configuration, or returns an error that StartPair returns before
// it starts anything.
type Option func(*config) error

// config is what the Options set.
type config struct {
	option.Common
	option.Latency
	tags        int
	tagInterval time.Duration
	setpoints   int
	heartbeat   time.Duration
	levels      [2]byte
	redundancy  ua.RedundancySupport
	uris        [2]string
	minPublish  time.Duration
	retransmit  int
	partners    bool
}

// newConfig applies opts to the defaults (see option.Apply).
func newConfig(opts []Option) (config, error) {
	cfg := config{
		Common:      option.Common{Logger: zerolog.Nop(), ReadyWait: 10 * time.Second},
		tags:        16,
		tagInterval: 100 * time.Millisecond,
		setpoints:   2,
		heartbeat:   100 * time.Millisecond,
		levels:      [2]byte{LevelPrimary, LevelHealthyFollower},
		redundancy:  ua.RedundancySupportWarm,
		uris:        [2]string{"urn:apbridge:testcluster:opcua:A", "urn:apbridge:testcluster:opcua:B"},
		minPublish:  10 * time.Millisecond,
		retransmit:  defaultRetransmitQueue,
	}
	err := option.Apply(&cfg, opts)
	return cfg, err
}

// WithLogger sends the servers' log lines to l (default: no logging). The
// pair logs level changes, scripted events, kills and restarts at Info.
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error { c.Logger = l; return nil }
}

// WithClientRTT adds rtt/2 of latency in each direction between clients
// and both servers, through the proxies they are behind; the latency
// survives their restarts (see Server.SetLatency).
func WithClientRTT(rtt time.Duration) Option {
	return func(c *config) error { return c.SetClientRTT("uaserver", rtt) }
}

// WithReadyTimeout bounds how long StartPair and a Restart wait for a
// server to answer a client's read (default 10 s).
func WithReadyTimeout(d time.Duration) Option {
	return func(c *config) error { return c.SetReadyTimeout("uaserver", d) }
}

// WithTags sets the number of simulated tags (default 16, at least 0).
// Kinds rotate Counter, Ramp, Sine, Bool, so tag i is of kind i%4.
func WithTags(n int) Option {
	return countOption("WithTags", "tags", n, func(c *config) { c.tags = n })
}

// WithTagInterval sets how often the simulated process ticks: every tag
// gets a new value and source timestamp each tick (default 100 ms, at
// least 1 ms). A client sees every tick only if it publishes at least as
// often, or asks for a queue.
func WithTagInterval(d time.Duration) Option {
	return periodOption("WithTagInterval", "interval", d, func(c *config) { c.tagInterval = d })
}

// WithSetpoints sets the number of writable setpoints (default 2, at
// least 0).
func WithSetpoints(n int) Option {
	return countOption("WithSetpoints", "setpoints", n, func(c *config) { c.setpoints = n })
}

// WithHeartbeat sets how often each server samples CurrentTime (i=2258)
// for its subscribers (default 100 ms, at least 1 ms): the heartbeat whose
// gaps reveal a frozen link.
func WithHeartbeat(d time.Duration) Option {
	return periodOption("WithHeartbeat", "heartbeat", d, func(c *config) { c.heartbeat = d })
}

// countOption is an option that sets a count of what, which cannot be
// negative.
func countOption(name, what string, n int, set func(*config)) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("uaserver: %s(%d): the number of %s cannot be negative", name, n, what)
		}
		set(c)
		return nil
	}
}

// periodOption is an option that sets a period, at least 1 ms.
func periodOption(name, what string, d time.Duration, set func(*config)) Option {
	return func(c *config) error {
		if d < time.Millisecond {
			return fmt.Errorf("uaserver: %s(%v): the %s must be at least 1ms", name, d, what)
		}
		set(c)
		return nil
	}
}

// WithServiceLevels sets the ServiceLevels A and B start with (default
// 250 and 240: a healthy primary and a healthy follower).
func WithServiceLevels(a, b byte) Option {
	return func(c *config) error {
		c.levels = [2]byte{a, b}
		return nil
	}
}

// WithRedundancySupport sets the RedundancySupport both servers report
// (i=3709; default Warm). Cold, Warm, Hot and HotAndMirrored also expose
// ServerRedundancy.ServerUriArray (i=11314).
func WithRedundancySupport(m ua.RedundancySupport) Option {
	return func(c *config) error {
		if m > ua.RedundancySupportHotAndMirrored {
			return fmt.Errorf("uaserver: WithRedundancySupport(%d): not a defined mode", m)
		}
		c.redundancy = m
		return nil
	}
}

// WithApplicationURIs sets the servers' ApplicationUris (default
// urn:apbridge:testcluster:opcua:A and :B). Both must be set and differ:
// a client tells the servers apart by them.
func WithApplicationURIs(a, b string) Option {
	return func(c *config) error {
		if a == "" || b == "" || a == b {
			return fmt.Errorf("uaserver: WithApplicationURIs(%q, %q): both must be set and differ", a, b)
		}
		c.uris = [2]string{a, b}
		return nil
	}
}

// WithMinPublishingInterval sets the shortest publishing interval the
// servers grant (default 10 ms, at least 1 ms). Requests for less,
// including 0, get it.
func WithMinPublishingInterval(d time.Duration) Option {
	return periodOption("WithMinPublishingInterval", "interval", d, func(c *config) { c.minPublish = d })
}

// WithRetransmitQueue sets how many sent data messages each subscription
// keeps, until the client acknowledges them, for Republish (default 1000;
// 0 keeps none, and Republish answers Bad_MessageNotAvailable, as a server
// without a retransmission queue does). The oldest go first when it is
// full.
func WithRetransmitQueue(n int) Option {
	return countOption("WithRetransmitQueue", "messages", n, func(c *config) { c.retransmit = n })
}

// WithPartnerDiscovery makes each server answer FindServers with the
// other's description too (its ApplicationUri and endpoint), as servers
// of a redundant set may: a client given one server finds the other
// (see Server.SetPartner). By default a server knows only itself.
func WithPartnerDiscovery() Option {
	return func(c *config) error { c.partners = true; return nil }
}
