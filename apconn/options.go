package apconn

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/ldm"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Option configures a Conn.
type Option func(*options) error

type options struct {
	name             string
	handling         ldm.LameDuckHandling
	natsOpts         []nats.Option
	logger           zerolog.Logger
	onEvent          func(Event)
	confirmInterval  time.Duration
	livenessInterval time.Duration
	livenessTimeout  time.Duration
	replayBytes      int
	overlap          time.Duration
	dedupeTail       time.Duration
	proveTimeout     time.Duration
	failOnAuth       bool
	armBackoffMin    time.Duration
	armBackoffMax    time.Duration
	reconnectWait    time.Duration
	fastCutover      bool
	connectTimeout   time.Duration
}

func defaultOptions() options {
	return options{
		name:             "apconn",
		handling:         ldm.Default,
		logger:           zerolog.Nop(),
		confirmInterval:  20 * time.Millisecond,
		livenessInterval: time.Second,
		livenessTimeout:  2 * time.Second,
		replayBytes:      8 << 20,
		overlap:          250 * time.Millisecond,
		dedupeTail:       250 * time.Millisecond,
		proveTimeout:     2 * time.Second,
		armBackoffMin:    100 * time.Millisecond,
		armBackoffMax:    5 * time.Second,
		reconnectWait:    2 * time.Second,
		connectTimeout:   2 * time.Second,
	}
}

// WithName names the connection. Both nats.Conn carry this name, so
// `nats server report connections` shows them together. Default "apconn".
func WithName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return fmt.Errorf("apconn: name: must not be empty")
		}
		o.name = name
		return nil
	}
}

// WithLameDuckHandling sets what the Conn does when a broker announces
// lame-duck mode. Default ldm.SwitchToPassive.
func WithLameDuckHandling(h ldm.LameDuckHandling) Option {
	return func(o *options) error {
		if !h.Valid() {
			return fmt.Errorf("apconn: lame-duck handling: %v is not valid (valid: NONE, SWITCH_TO_PASSIVE, PASSIVE_ONLY)", h)
		}
		o.handling = h
		return nil
	}
}

// WithNATSOptions passes options to every nats.Conn the Conn opens:
// credentials, TLS, timeouts and so on. The Conn sets its own handlers,
// name, reconnect steering and server list; options that set those are
// overridden.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) error {
		o.natsOpts = append(o.natsOpts, opts...)
		return nil
	}
}

// WithLogger logs through l. Every switch is logged once, at Info, with its
// cause, servers and duration. Default: no logging.
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error {
		o.logger = l
		return nil
	}
}

// WithEventHandler calls h for every Event (switches, passive armed or
// lost, lame-duck notices, degraded state). Events are delivered in order on
// a goroutine of the Conn's; a slow handler delays later events but never a
// switch.
func WithEventHandler(h func(Event)) Option {
	return func(o *options) error {
		o.onEvent = h
		return nil
	}
}

// WithConfirmInterval sets how often the active is asked (PING) to confirm
// the publishes sent so far. A publish is kept for replay until confirmed,
// so the interval bounds how much is replayed, and duplicated, after a
// broker dies. Default 20 ms; valid 1 ms to 10 s.
func WithConfirmInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond || d > 10*time.Second {
			return fmt.Errorf("apconn: confirm interval: %v is out of range (valid 1ms-10s)", d)
		}
		o.confirmInterval = d
		return nil
	}
}

// WithLiveness sets how often an idle link is checked and how long a PING
// may go unanswered before the link counts as dead. A link that keeps
// delivering other bytes meanwhile is busy, not dead: it counts as dead
// only after four timeouts without the PONG. A dead active is
// replaced by the passive; a dead passive is re-homed. nats.go alone notices
// a frozen link only after minutes. Defaults 1 s and 2 s; the timeout must
// be at least 10 ms and the interval at least 10 ms.
func WithLiveness(interval, timeout time.Duration) Option {
	return func(o *options) error {
		if interval < 10*time.Millisecond {
			return fmt.Errorf("apconn: liveness interval: %v is out of range (valid >= 10ms)", interval)
		}
		if timeout < 10*time.Millisecond {
			return fmt.Errorf("apconn: liveness timeout: %v is out of range (valid >= 10ms)", timeout)
		}
		o.livenessInterval, o.livenessTimeout = interval, timeout
		return nil
	}
}

// WithReplayBuffer bounds the bytes of unconfirmed publishes kept for
// replay, and of publishes held while no broker is usable. When it is full
// while publishes are held, Publish returns ErrPublishBufferFull; nothing is
// dropped silently. Default 8 MiB, like nats.go's reconnect buffer; valid
// 64 KiB to 1 GiB.
func WithReplayBuffer(bytes int) Option {
	return func(o *options) error {
		if bytes < 64<<10 || bytes > 1<<30 {
			return fmt.Errorf("apconn: replay buffer: %d bytes is out of range (valid 65536-1073741824)", bytes)
		}
		o.replayBytes = bytes
		return nil
	}
}

// WithOverlap sets how long, at least, subscriptions stay on the old active
// after they are established on the new one, and how long afterwards
// copies of a message arriving on the second path are still suppressed.
// The overlap covers the time other brokers need to learn the new interest;
// it bounds the window in which duplicates can occur. Defaults 250 ms and
// 250 ms; valid 0 to 1 min each.
func WithOverlap(overlap, tail time.Duration) Option {
	return func(o *options) error {
		if overlap < 0 || overlap > time.Minute {
			return fmt.Errorf("apconn: overlap: %v is out of range (valid 0-1m)", overlap)
		}
		if tail < 0 || tail > time.Minute {
			return fmt.Errorf("apconn: overlap tail: %v is out of range (valid 0-1m)", tail)
		}
		o.overlap, o.dedupeTail = overlap, tail
		return nil
	}
}

// WithFastCutover makes a switch move publishing to the new active without
// waiting for the old one to confirm what it was sent. Subscribers then see
// a few milliseconds of silence at a switch instead of a round trip to the
// old broker, but a publisher's messages can reach subscribers
// out of order when the old broker still has a backlog of them as the first
// ones reach the new broker: a burst published just before the switch. The
// cutover still waits until nats.go has written the last publish to the old
// broker's socket (at most 10 ms), then for the measured difference between
// the two brokers' one-way latencies plus 5 ms, which keeps the order of a
// steady publisher unless a broker falls that far behind. On a LAN the
// default ordered cutover is the quicker of the two; this one pays off
// where the round trip to the old broker is long.
//
// By default a switch holds new publishes (Publish still returns at once)
// until the old active has confirmed every publish sent to it and a probe
// sent after them has come through the old broker's route to the new one,
// so that subscribers on the Conn and on either broker see a publisher's
// messages in order. That costs subscribers about one round trip of
// silence at each switch (see docs/apconn.md, which also says what holds
// for subscribers on other brokers).
func WithFastCutover() Option {
	return func(o *options) error {
		o.fastCutover = true
		return nil
	}
}

// WithPassiveBackoff sets the delays between attempts to arm a passive when
// none can be had: exponential from min to max, with jitter. Defaults
// 100 ms and 5 s.
func WithPassiveBackoff(min, max time.Duration) Option {
	return func(o *options) error {
		if min <= 0 || max < min {
			return fmt.Errorf("apconn: passive backoff: min %v and max %v must satisfy 0 < min <= max", min, max)
		}
		o.armBackoffMin, o.armBackoffMax = min, max
		return nil
	}
}

// WithReconnectWait sets the delay between nats.go reconnect rounds when
// the active is down and no passive can take over. Default 2 s, as nats.go.
func WithReconnectWait(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("apconn: reconnect wait: %v must be positive", d)
		}
		o.reconnectWait = d
		return nil
	}
}

// WithProveTimeout bounds the end-to-end proof of a new passive: a message
// each way between the active and the passive through the cluster. Default
// 2 s.
func WithProveTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("apconn: prove timeout: %v must be positive", d)
		}
		o.proveTimeout = d
		return nil
	}
}

// WithConnectTimeout bounds each attempt to open a nats.Conn to one server.
// Default 2 s, as nats.go.
func WithConnectTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("apconn: connect timeout: %v must be positive", d)
		}
		o.connectTimeout = d
		return nil
	}
}

// WithFailOnAuthError makes Connect return ErrAuthorization as soon as
// the servers refuse the credentials, instead of retrying until its
// context ends: for a process that should exit and say so rather than
// wait for credentials that will not change.
func WithFailOnAuthError() Option {
	return func(o *options) error { o.failOnAuth = true; return nil }
}
