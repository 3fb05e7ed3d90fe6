package testcluster

import (
	"fmt"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// Option configures StartNATS or StartOPCUAPair, in nats.go's style: it
// sets a field, or returns an error that the constructor returns.
//
// One type serves both constructors so that what both have (a logger, a
// client round-trip time, a readiness bound) has one name: WithLogger,
// WithClientRTT and WithReadyTimeout apply to whichever is built. Every
// other option belongs to one of them, and given to the other it makes the
// constructor fail with an error that names the option and what it applies
// to, rather than being ignored: a test that asks for 500 tags on a NATS
// cluster has a mistake in it.
type Option func(*options) error

// options is what an Option sets: the settings both constructors share
// and the configuration of the one thing being built. Exactly one of nats
// and opcua is set; common points into it.
type options struct {
	common *commonConfig
	nats   *natsConfig
	opcua  *opcuaConfig
}

// commonConfig is what a NATS cluster and an OPC UA pair both have.
type commonConfig struct {
	logger    zerolog.Logger
	delay     time.Duration // one-way latency through the proxies: rtt/2
	readyWait time.Duration
}

type natsConfig struct {
	commonConfig
	nodes     int
	jetStream bool
	ldmDur    time.Duration
	ldmGrace  time.Duration
	tls       bool
	proxies   bool
	dir       string
	user      string
	password  string
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
	builtNATS  = "a NATS cluster"
	builtOPCUA = "an OPC UA pair"
)

// natsOptions applies opts to the defaults of a NATS cluster.
func natsOptions(opts []Option) (natsConfig, error) {
	cfg := natsConfig{
		commonConfig: commonConfig{logger: zerolog.Nop(), readyWait: 30 * time.Second},
		nodes:        3,
		ldmGrace:     10 * time.Second,
	}
	err := apply(&options{common: &cfg.commonConfig, nats: &cfg}, opts)
	return cfg, err
}

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
	if o.nats != nil {
		return builtNATS
	}
	return builtOPCUA
}

// natsOnly makes an option that only a NATS cluster takes.
func natsOnly(name string, f func(*natsConfig) error) Option {
	return func(o *options) error {
		if o.nats == nil {
			return notApplicable(name, builtNATS, o.built())
		}
		return f(o.nats)
	}
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
// Info.
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error {
		o.common.logger = l
		return nil
	}
}

// WithClientRTT adds rtt/2 of latency in each direction between clients
// and every server, through FaultProxies. A NATS cluster gets a proxy in
// front of every node for it, as WithProxies; an OPC UA pair's servers are
// behind proxies anyway, and the latency survives their restarts (see
// OPCUAServer.SetLatency).
func WithClientRTT(rtt time.Duration) Option {
	return func(o *options) error {
		if rtt < 0 {
			return fmt.Errorf("testcluster: WithClientRTT(%v): a round-trip time cannot be negative", rtt)
		}
		o.common.delay = rtt / 2
		if o.nats != nil {
			o.nats.proxies = true
		}
		return nil
	}
}

// WithReadyTimeout bounds how long the constructor and a Restart wait for
// readiness: a NATS cluster forwarding end to end (default 30 s), an OPC
// UA server answering a client's read (default 10 s).
func WithReadyTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("testcluster: WithReadyTimeout(%v): the timeout must be positive", d)
		}
		o.common.readyWait = d
		return nil
	}
}

// ---- NATS cluster options ----

// WithNodes sets the number of nodes (default 3, at least 1).
func WithNodes(n int) Option {
	return natsOnly("WithNodes", func(c *natsConfig) error {
		if n < 1 {
			return fmt.Errorf("testcluster: WithNodes(%d): a cluster needs at least 1 node", n)
		}
		c.nodes = n
		return nil
	})
}

// WithJetStream enables JetStream on every node with a store in a temporary
// directory that Close removes.
func WithJetStream() Option {
	return natsOnly("WithJetStream", func(c *natsConfig) error { c.jetStream = true; return nil })
}

// WithLameDuck sets the lame-duck duration and grace period of every node.
// The grace period is how long a node waits after announcing LDM before it
// evicts its clients; the duration bounds the whole eviction. The defaults
// are a 10 s grace, as nats-server ships, and a duration 1 s longer so that
// every client is gone soon after the grace period ends; a duration of 0
// means that default. nats-server requires the grace to be shorter than
// the duration.
func WithLameDuck(duration, grace time.Duration) Option {
	return natsOnly("WithLameDuck", func(c *natsConfig) error {
		c.ldmDur, c.ldmGrace = duration, grace
		return nil
	})
}

// WithTLS serves TLS on every client port, with a certificate signed by a CA
// generated at start (see NATSCluster.CA).
func WithTLS() Option {
	return natsOnly("WithTLS", func(c *natsConfig) error { c.tls = true; return nil })
}

// WithUser makes every node require this user and password of clients;
// ClientOptions carries them. For tests of refused credentials.
func WithUser(user, password string) Option {
	return natsOnly("WithUser", func(c *natsConfig) error {
		if user == "" || password == "" {
			return fmt.Errorf("WithUser: user and password must not be empty")
		}
		c.user, c.password = user, password
		return nil
	})
}

// WithProxies puts a faultproxy.Proxy in front of every node's client
// port. The URLs the cluster hands out, and the ones nodes advertise to
// clients, go through the proxies. (An OPC UA pair's servers always have
// one.)
func WithProxies() Option {
	return natsOnly("WithProxies", func(c *natsConfig) error { c.proxies = true; return nil })
}

// WithDir keeps server state (JetStream store, CA file) under dir instead of
// a temporary directory. The directory is not removed by Close.
func WithDir(dir string) Option {
	return natsOnly("WithDir", func(c *natsConfig) error { c.dir = dir; return nil })
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
