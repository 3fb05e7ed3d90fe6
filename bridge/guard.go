package bridge

import (
	"errors"
	"fmt"
	"time"
)

// GuardConfig sets the subscribe-storm guard of a source. The defaults
// come from an incident with a tag gateway: a client re-sent its
// subscribe every 5 s while the previous one was still outstanding, the
// gateway queued them all, and 244 tags stayed frozen for 20 minutes. One
// request in flight, a backoff from 5 s to 60 s and a ceiling on a lost
// reply stop that.
type GuardConfig struct {
	// RetryFloor is the first delay after a failed subscribe (default 5 s).
	RetryFloor time.Duration `yaml:"retryFloor" json:"retryFloor"`
	// RetryCeiling caps the doubling delay (default 60 s).
	RetryCeiling time.Duration `yaml:"retryCeiling" json:"retryCeiling"`
	// InFlightCeiling is how long a subscribe may go unanswered before its
	// reply is presumed lost and one new request may go (default 45 s).
	InFlightCeiling time.Duration `yaml:"inFlightCeiling" json:"inFlightCeiling"`
	// Jitter is the fraction of each delay drawn at random, so that many
	// sources do not retry in step (default 0.5: a delay d is drawn from
	// [d/2, d]).
	Jitter float64 `yaml:"jitter" json:"jitter"`
}

// DefaultGuardConfig returns the defaults.
func DefaultGuardConfig() GuardConfig {
	return GuardConfig{RetryFloor: 5 * time.Second, RetryCeiling: 60 * time.Second,
		InFlightCeiling: 45 * time.Second, Jitter: 0.5}
}

// Validate checks the ranges and reports every problem (errors.Join);
// errors name the field and the allowed range.
func (c GuardConfig) Validate() error {
	var errs []error
	if c.RetryFloor < 10*time.Millisecond || c.RetryFloor > time.Hour {
		errs = append(errs, fmt.Errorf("subscribe.retryFloor: %v is out of range (valid 10ms-1h)", c.RetryFloor))
	}
	if c.RetryCeiling < c.RetryFloor || c.RetryCeiling > 24*time.Hour {
		errs = append(errs, fmt.Errorf("subscribe.retryCeiling: %v is out of range (valid retryFloor (%v) to 24h)", c.RetryCeiling, c.RetryFloor))
	}
	if c.InFlightCeiling < 10*time.Millisecond || c.InFlightCeiling > 24*time.Hour {
		errs = append(errs, fmt.Errorf("subscribe.inFlightCeiling: %v is out of range (valid 10ms-24h)", c.InFlightCeiling))
	}
	if c.Jitter < 0 || c.Jitter > 1 {
		errs = append(errs, fmt.Errorf("subscribe.jitter: %v is out of range (valid 0-1)", c.Jitter))
	}
	return errors.Join(errs...)
}

// subscribeGuard decides when a source's subscribe requests go, so that a
// slow or wedged source is never flooded:
//
//   - at most one request is in flight per source connection;
//   - after a failure the next one waits an exponential, jittered delay from
//     RetryFloor to RetryCeiling;
//   - a request unanswered for InFlightCeiling is presumed lost and one new
//     request may go; the reply to a superseded request is dropped;
//   - the delay resets to the floor on success and when the source's
//     connection is restored;
//   - a retry due at the moment a success arrives does not send again.
//
// It is a pure state machine: every method takes the current time and
// returns whether to send now. It is not safe for concurrent use.
type subscribeGuard struct {
	cfg  GuardConfig
	rand func() float64

	want     bool      // something still needs subscribing
	inFlight bool      // a request is outstanding and not presumed lost
	reqID    uint64    // the current request; replies to others are dropped
	sentAt   time.Time // when the current request went
	delay    time.Duration
	retryAt  time.Time // no request before this

	sent, superseded, lost, failures uint64
}

// guardDecision says whether to send a subscribe request now.
type guardDecision struct {
	Send bool
	// ReqID identifies the request to send; quote it in Reply.
	ReqID uint64
	// Reason is why it goes: "first", "retry", "lost-reply", "restored".
	Reason string
}

// newSubscribeGuard returns a guard; rand returns numbers in [0, 1) for the
// jitter (math/rand/v2's Float64 in production, a fixed function in tests).
func newSubscribeGuard(cfg GuardConfig, rand func() float64) *subscribeGuard {
	return &subscribeGuard{cfg: cfg, rand: rand, delay: cfg.RetryFloor}
}

func (g *subscribeGuard) send(now time.Time, reason string) guardDecision {
	g.reqID++
	g.inFlight = true
	g.sentAt = now
	g.sent++
	return guardDecision{Send: true, ReqID: g.reqID, Reason: reason}
}

// Want records that tags need subscribing (at start, when tags are added,
// or while some failed) and sends if the guard allows it now.
func (g *subscribeGuard) Want(now time.Time) guardDecision {
	first := !g.want && g.sent == 0
	g.want = true
	if g.inFlight || now.Before(g.retryAt) {
		return guardDecision{}
	}
	if first {
		return g.send(now, "first")
	}
	return g.send(now, "retry")
}

// Reply records the answer to request id: ok means every tag subscribed.
// A reply to a superseded request changes nothing.
func (g *subscribeGuard) Reply(now time.Time, id uint64, ok bool) guardDecision {
	if id != g.reqID || !g.inFlight {
		g.superseded++
		return guardDecision{}
	}
	g.inFlight = false
	if ok {
		g.want = false
		g.delay = g.cfg.RetryFloor
		g.retryAt = time.Time{}
		return guardDecision{}
	}
	g.failures++
	g.retryAt = now.Add(g.jittered(g.delay))
	g.delay = min(g.delay*2, g.cfg.RetryCeiling)
	return guardDecision{}
}

// Restored records that the source's connection was re-established: the
// source lost its subscriptions, the request in flight (on the old
// connection) is superseded, the delay resets to the floor and a request
// goes at once.
func (g *subscribeGuard) Restored(now time.Time) guardDecision {
	g.want = true
	g.inFlight = false
	g.delay = g.cfg.RetryFloor
	g.retryAt = time.Time{}
	return g.send(now, "restored")
}

// Tick sends a due retry, or a new request when the one in flight has gone
// unanswered for InFlightCeiling.
func (g *subscribeGuard) Tick(now time.Time) guardDecision {
	switch {
	case g.inFlight:
		if now.Sub(g.sentAt) >= g.cfg.InFlightCeiling {
			g.lost++
			return g.send(now, "lost-reply")
		}
	case g.want && !now.Before(g.retryAt):
		return g.send(now, "retry")
	}
	return guardDecision{}
}

// NextDeadline returns when Tick next has something to do.
func (g *subscribeGuard) NextDeadline() (time.Time, bool) {
	switch {
	case g.inFlight:
		return g.sentAt.Add(g.cfg.InFlightCeiling), true
	case g.want:
		return g.retryAt, true
	}
	return time.Time{}, false
}

// current reports whether id is the request the guard awaits: a reply to
// any other is superseded.
func (g *subscribeGuard) current(id uint64) bool { return id == g.reqID && g.inFlight }

// SendsNow reports whether a Want now would send at once: no request
// is outstanding and no retry delay runs.
func (g *subscribeGuard) SendsNow(now time.Time) bool { return !g.inFlight && !now.Before(g.retryAt) }

// InFlight reports whether a request is outstanding.
func (g *subscribeGuard) InFlight() bool { return g.inFlight }

// guardStats counts what a guard did.
type guardStats struct {
	Requests    uint64 // requests sent
	Failures    uint64 // replies that were failures
	LostReplies uint64 // requests presumed lost after InFlightCeiling
	Superseded  uint64 // replies dropped because a newer request had gone
}

// Stats returns the counters.
func (g *subscribeGuard) Stats() guardStats {
	return guardStats{Requests: g.sent, Failures: g.failures, LostReplies: g.lost, Superseded: g.superseded}
}

func (g *subscribeGuard) jittered(d time.Duration) time.Duration {
	if g.cfg.Jitter <= 0 || g.rand == nil {
		return d
	}
	j := time.Duration(float64(d) * g.cfg.Jitter * g.rand())
	return d - j
}
