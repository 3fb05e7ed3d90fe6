package testcluster

import (
	"fmt"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// Option configures StartOPCUAPair, in nats.go's style: it sets a field,
// or returns an error that the constructor returns.
type Option func(*options) error

// options is what an Option sets: the settings both constructors share
// and, for an OPC UA pair, its configuration; common points into it.
type options struct {
	common *commonConfig
	opcua  *opcuaConfig
}

// commonConfig is what an OPC UA pair and an MxAccess gateway both have.
type commonConfig struct {
	logger    zerolog.Logger
	delay     time.Duration // one-way latency through the proxies: rtt/2
	readyWait time.Duration
}

type opcuaConfig struct {
	commonConfig
	tags        int
	tagInterval time.Duration
	setpoints   int
	heartbeat   time.Duration
	levels      [2]byte
	redundancy  ua.RedundancySupport
	uris        [2]string
	minPublish  time.Duration
	retransmit  int
}

const (
	builtMx    = "an MxAccess gateway"
	builtOPCUA = "an OPC UA pair"
)

// opcuaOptions applies opts to the defaults of an OPC UA pair.
func opcuaOptions(opts []Option) (opcuaConfig, error) {
	cfg := opcuaConfig{
		commonConfig: commonConfig{logger: zerolog.Nop(), readyWait: 10 * time.Second},
		tags:         16,
		tagInterval:  100 * time.Millisecond,
		setpoints:    2,
		heartbeat:    100 * time.Millisecond,
		levels:       [2]byte{LevelPrimary, LevelHealthyFollower},
		redundancy:   ua.RedundancySupportWarm,
		uris:         [2]string{"urn:apbridge:testcluster:opcua:A", "urn:apbridge:testcluster:opcua:B"},
		minPublish:   10 * time.Millisecond,
		retransmit:   defaultRetransmitQueue,
	}
	err := apply(&options{common: &cfg.commonConfig, opcua: &cfg}, opts)
	return cfg, err
}

// apply runs opts in order and stops at the first error. A nil Option is
// skipped, as nats.go does, so that callers can build lists with optional
// entries.
func apply(o *options, opts []Option) error {
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(o); err != nil {
			return err
		}
	}
	return nil
}

func (o *options) built() string {
	if o.opcua != nil {
		return builtOPCUA
	}
	return builtMx
}

// opcuaOnly makes an option that only an OPC UA pair takes.
func opcuaOnly(name string, f func(*opcuaConfig) error) Option {
	return func(o *options) error {
		if o.opcua == nil {
			return notApplicable(name, builtOPCUA, o.built())
		}
		return f(o.opcua)
	}
}

func notApplicable(name, want, built string) error {
	return fmt.Errorf("testcluster: %s applies to %s, not %s", name, want, built)
}

// ---- options for both ----

// WithLogger sends the servers' log lines to l (default: no logging). An
// OPC UA pair logs level changes, scripted events, kills and restarts at
// Info; an MxAccess gateway logs sessions at Debug, faults and lifecycle
// at Info.
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error {
		o.common.logger = l
		return nil
	}
}

// WithClientRTT adds rtt/2 of latency in each direction between clients
// and an OPC UA pair's servers, through the proxies they are behind; the
// latency survives their restarts (see OPCUAServer.SetLatency).
func WithClientRTT(rtt time.Duration) Option {
	return func(o *options) error {
		if rtt < 0 {
			return fmt.Errorf("testcluster: WithClientRTT(%v): a round-trip time cannot be negative", rtt)
		}
		o.common.delay = rtt / 2
		return nil
	}
}

// WithReadyTimeout bounds how long the constructor and a Restart wait for
// readiness: an OPC UA server answering a client's read (default 10 s), an
// MxAccess gateway's port free again (default 10 s).
func WithReadyTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("testcluster: WithReadyTimeout(%v): the timeout must be positive", d)
		}
		o.common.readyWait = d
		return nil
	}
}

// ---- OPC UA pair options ----

// WithTags sets the number of simulated tags (default 16, at least 0).
// Kinds rotate Counter, Ramp, Sine, Bool, so tag i is of kind i%4.
func WithTags(n int) Option {
	return opcuaCount("WithTags", "tags", n, func(c *opcuaConfig) { c.tags = n })
}

// WithTagInterval sets how often the simulated process ticks: every tag
// gets a new value and source timestamp each tick (default 100 ms, at
// least 1 ms). A client sees every tick only if it publishes at least as
// often, or asks for a queue.
func WithTagInterval(d time.Duration) Option {
	return opcuaPeriod("WithTagInterval", "interval", d, func(c *opcuaConfig) { c.tagInterval = d })
}

// WithSetpoints sets the number of writable setpoints (default 2, at
// least 0).
func WithSetpoints(n int) Option {
	return opcuaCount("WithSetpoints", "setpoints", n, func(c *opcuaConfig) { c.setpoints = n })
}

// WithHeartbeat sets how often each server samples CurrentTime (i=2258)
// for its subscribers (default 100 ms, at least 1 ms): the heartbeat whose
// gaps reveal a frozen link.
func WithHeartbeat(d time.Duration) Option {
	return opcuaPeriod("WithHeartbeat", "heartbeat", d, func(c *opcuaConfig) { c.heartbeat = d })
}

// opcuaCount is an OPC UA pair option that sets a count of what, which
// cannot be negative.
func opcuaCount(name, what string, n int, set func(*opcuaConfig)) Option {
	return opcuaOnly(name, func(c *opcuaConfig) error {
		if n < 0 {
			return fmt.Errorf("testcluster: %s(%d): the number of %s cannot be negative", name, n, what)
		}
		set(c)
		return nil
	})
}

// opcuaPeriod is an OPC UA pair option that sets a period, at least 1 ms.
func opcuaPeriod(name, what string, d time.Duration, set func(*opcuaConfig)) Option {
	return opcuaOnly(name, func(c *opcuaConfig) error {
		if d < time.Millisecond {
			return fmt.Errorf("testcluster: %s(%v): the %s must be at least 1ms", name, d, what)
		}
		set(c)
		return nil
	})
}

// WithServiceLevels sets the ServiceLevels A and B start with (default
// 250 and 240: a healthy primary and a healthy follower).
func WithServiceLevels(a, b byte) Option {
	return opcuaOnly("WithServiceLevels", func(c *opcuaConfig) error {
		c.levels = [2]byte{a, b}
		return nil
	})
}

// WithRedundancySupport sets the RedundancySupport both servers report
// (i=3709; default Warm). Cold, Warm, Hot and HotAndMirrored also expose
// ServerRedundancy.ServerUriArray (i=11314).
func WithRedundancySupport(m ua.RedundancySupport) Option {
	return opcuaOnly("WithRedundancySupport", func(c *opcuaConfig) error {
		if m > ua.RedundancySupportHotAndMirrored {
			return fmt.Errorf("testcluster: WithRedundancySupport(%d): not a defined mode", m)
		}
		c.redundancy = m
		return nil
	})
}

// WithApplicationURIs sets the servers' ApplicationUris (default
// urn:apbridge:testcluster:opcua:A and :B). Both must be set and differ:
// a client tells the servers apart by them.
func WithApplicationURIs(a, b string) Option {
	return opcuaOnly("WithApplicationURIs", func(c *opcuaConfig) error {
		if a == "" || b == "" || a == b {
			return fmt.Errorf("testcluster: WithApplicationURIs(%q, %q): both must be set and differ", a, b)
		}
		c.uris = [2]string{a, b}
		return nil
	})
}

// WithMinPublishingInterval sets the shortest publishing interval the
// servers grant (default 10 ms, at least 1 ms). Requests for less,
// including 0, get it.
func WithMinPublishingInterval(d time.Duration) Option {
	return opcuaPeriod("WithMinPublishingInterval", "interval", d, func(c *opcuaConfig) { c.minPublish = d })
}

// WithRetransmitQueue sets how many sent data messages each subscription
// keeps, until the client acknowledges them, for Republish (default 1000;
// 0 keeps none, and Republish answers Bad_MessageNotAvailable, as a server
// without a retransmission queue does). The oldest go first when it is
// full.
func WithRetransmitQueue(n int) Option {
	return opcuaCount("WithRetransmitQueue", "messages", n, func(c *opcuaConfig) { c.retransmit = n })
}
