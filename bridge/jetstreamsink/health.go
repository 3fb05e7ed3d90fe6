package jetstreamsink

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
)

// Health is the result of a health check of the sink, graded as jsm.go's
// monitor package (the `nats server check stream` of the NATS CLI) grades
// a stream: a leader, every replica present, online, seen recently and not
// lagging; and the round trip of the relay's own active connection.
type Health struct {
	CheckedAt time.Time `json:"checkedAt"`
	Stream    string    `json:"stream"`
	// Leader is the broker that leads the stream.
	Leader string `json:"leader,omitempty"`
	// Replicas is the configured replica count; Current how many of them
	// (the leader included) are online and caught up.
	Replicas int `json:"replicas"`
	Current  int `json:"current"`
	// Messages is how many messages the stream holds.
	Messages uint64 `json:"messages"`
	// RTTMs is the active connection's round trip to its broker.
	RTTMs float64 `json:"rttMs"`
	// Criticals and Warnings are the check's findings: a replica offline
	// or lagging is critical for the stream's redundancy.
	Criticals []string `json:"critical,omitempty"`
	Warnings  []string `json:"warning,omitempty"`
	// Blocking are the findings that stop the sink from storing updates:
	// no connection, a round trip over rttCritical, the stream not
	// loadable, no leader, fewer current replicas than a quorum. Any makes
	// the sink not ready.
	Blocking []string `json:"blocking,omitempty"`
}

// Healthy reports a check without critical findings.
func (h Health) Healthy() bool { return len(h.Criticals) == 0 }

// healthLoop checks health at once and then every HealthInterval.
func (s *Sink) healthLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	var last bool
	for first := true; ; first = false {
		if !first {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
			}
		}
		ctx, cancel := context.WithTimeout(s.ctx, max(s.cfg.HealthInterval, 2*time.Second))
		h := s.CheckHealth(ctx)
		cancel()
		if s.ctx.Err() != nil {
			return
		}
		if ok := h.Healthy(); ok != last || first {
			if ok {
				s.log.Info().Str("leader", h.Leader).Int("current", h.Current).Float64("rtt_ms", h.RTTMs).Msg("stream healthy")
			} else {
				s.log.Warn().Strs("critical", h.Criticals).Str("leader", h.Leader).Msg("stream not healthy")
			}
			last = ok
		}
	}
}

// CheckHealth checks the stream and the connection now, keeps the result
// for Health, Ready and Status, and returns it. ctx bounds the check.
func (s *Sink) CheckHealth(ctx context.Context) Health {
	h := Health{CheckedAt: time.Now(), Stream: s.cfg.Stream, Replicas: s.cfg.Replicas}
	nc := s.conn.Active()
	critical := func(msg string) { h.Criticals = append(h.Criticals, msg) }
	block := func(msg string) {
		critical(msg)
		h.Blocking = append(h.Blocking, msg)
	}
	if nc == nil || !nc.IsConnected() {
		block("no active NATS connection")
	} else {
		// The round trip on the relay's own connection rather than a new
		// one, graded against rttWarning and rttCritical.
		rctx, cancel := context.WithTimeout(ctx, 2*s.cfg.RTTCritical)
		start := time.Now()
		err := nc.FlushWithContext(rctx)
		rtt := time.Since(start)
		cancel()
		h.RTTMs = float64(rtt.Microseconds()) / 1000
		switch {
		case err != nil:
			block(fmt.Sprintf("rtt failed: %v", err))
		case rtt >= s.cfg.RTTCritical:
			block(fmt.Sprintf("rtt time %v exceeded %v", rtt, s.cfg.RTTCritical))
		case rtt >= s.cfg.RTTWarning:
			h.Warnings = append(h.Warnings, fmt.Sprintf("rtt time %v exceeded %v", rtt, s.cfg.RTTWarning))
		}
		timeout := 2 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = min(timeout, max(time.Until(dl), 500*time.Millisecond))
		}
		sctx, cancel := context.WithTimeout(ctx, timeout)
		s.checkStream(sctx, nc, &h, critical, block)
		cancel()
	}
	s.healthMu.Lock()
	s.health = h
	s.healthMu.Unlock()
	return h
}

// checkStream loads the stream's information and grades its cluster.
func (s *Sink) checkStream(ctx context.Context, nc *nats.Conn, h *Health, critical, block func(string)) {
	nfo, err := streamInfo(ctx, nc, s.cfg.Domain, s.cfg.Stream)
	if err != nil {
		block(fmt.Sprintf("could not load info: %v", err))
		return
	}
	h.Messages = nfo.State.Msgs
	if c := nfo.Cluster; c != nil {
		h.Leader = c.Leader
		if c.Leader != "" {
			h.Current = 1
		}
		for _, p := range c.Replicas {
			if p.Current && !p.Offline {
				h.Current++
			}
		}
	} else {
		h.Current = 1
	}
	for _, msg := range gradeCluster(nfo, s.cfg.Replicas, s.cfg.ReplicaLagCritical, s.cfg.ReplicaSeenCritical) {
		critical(msg)
	}
	var msg string
	switch quorum := s.cfg.Replicas/2 + 1; {
	case h.Leader == "" && s.cfg.Replicas > 1:
		msg = "no stream leader"
	case h.Current < quorum:
		msg = fmt.Sprintf("%d of %d replicas current, fewer than a quorum of %d", h.Current, s.cfg.Replicas, quorum)
	}
	if msg != "" {
		block(msg)
	}
}

// gradeCluster returns the critical findings about a replicated stream's
// cluster, by the rules of jsm.go's monitor package: a leader, the
// expected number of peers, and no replica offline, lagging by more than
// lagCritical operations or unseen for longer than seenCritical (zero
// turns either check off).
func gradeCluster(nfo *api.StreamInfo, replicas int, lagCritical uint64, seenCritical time.Duration) []string {
	if replicas <= 1 {
		return nil
	}
	c := nfo.Cluster
	if c == nil || nfo.Config.Replicas <= 1 {
		return []string{"Stream is not clustered"}
	}
	if c.Leader == "" {
		return []string{"No leader"}
	}
	if peers := len(c.Replicas) + 1; peers != replicas {
		return []string{fmt.Sprintf("Expected %d replicas got %d", replicas, peers)}
	}
	var out []string
	var offline, lagged, inactive int
	for _, p := range c.Replicas {
		if p.Offline {
			offline++
		}
		if lagCritical > 0 && p.Lag > lagCritical {
			lagged++
		}
		if seenCritical > 0 && p.Active > seenCritical {
			inactive++
		}
	}
	if offline > 0 {
		out = append(out, fmt.Sprintf("%d replicas offline", offline))
	}
	if lagged > 0 {
		out = append(out, fmt.Sprintf("%d replicas lagged", lagged))
	}
	if inactive > 0 {
		out = append(out, fmt.Sprintf("%d replicas inactive", inactive))
	}
	return out
}

// Health returns the last health check (HealthInterval apart; CheckHealth
// runs one now).
func (s *Sink) Health() Health {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	h := s.health
	h.Criticals = append([]string(nil), h.Criticals...)
	h.Warnings = append([]string(nil), h.Warnings...)
	h.Blocking = append([]string(nil), h.Blocking...)
	return h
}

// Ready reports whether the sink can store updates now, and if not, why:
// one reason per problem, for an HTTP /readyz. It is not ready when it is
// closed, the stream is not set up, the last health check found a blocking
// problem (Health.Blocking) or is too old, the ApConnection has
// no usable active connection, or the oldest unacknowledged update has
// waited more than three ack timeouts. A replica offline or lagging while
// a quorum is current leaves it ready (the stream still stores) but shows
// in the health's criticals. It does no I/O.
func (s *Sink) Ready() (bool, []string) {
	var reasons []string
	s.mu.Lock()
	closed := s.closed
	var oldest time.Duration
	if s.head != nil {
		oldest = time.Since(s.head.queuedAt)
	}
	s.mu.Unlock()
	if closed {
		return false, []string{"jetstream sink closed"}
	}
	if s.state.Load() == nil {
		reasons = append(reasons, fmt.Sprintf("stream %q not set up yet", s.cfg.Stream))
	}
	switch st := s.conn.Status(); st {
	case apconn.StatusReconnecting, apconn.StatusClosed:
		reasons = append(reasons, "NATS connection "+st.String())
	}
	h := s.Health()
	if h.CheckedAt.IsZero() {
		reasons = append(reasons, "stream health not checked yet")
	} else if age := time.Since(h.CheckedAt); age > 3*s.cfg.HealthInterval+5*time.Second {
		reasons = append(reasons, fmt.Sprintf("stream health last checked %v ago", age.Round(time.Millisecond)))
	}
	for _, c := range h.Blocking {
		reasons = append(reasons, "stream "+s.cfg.Stream+": "+c)
	}
	if oldest > 3*s.cfg.AckTimeout {
		reasons = append(reasons, fmt.Sprintf("oldest unacknowledged update has waited %v (ackTimeout %v)",
			oldest.Round(time.Millisecond), s.cfg.AckTimeout))
	}
	return len(reasons) == 0, reasons
}

// Status is the JetStream sink's part of the bridge's status.
type Status struct {
	// Stream is the stream's name.
	Stream string `json:"stream"`
	// Ready and Reasons are what Ready returns.
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons,omitempty"`
	// Stats are the sink's counters, Health its last health check.
	Stats  Stats  `json:"stats"`
	Health Health `json:"health"`
}

// Status returns readiness, counters and the last health check.
func (s *Sink) Status() Status {
	ready, reasons := s.Ready()
	return Status{Stream: s.cfg.Stream, Ready: ready, Reasons: reasons, Stats: s.Stats(), Health: s.Health()}
}

// SinkStatus implements bridge.StatusReporter: the bridge's status reply
// carries Status under "sink".
func (s *Sink) SinkStatus() any { return s.Status() }

// Stats are the sink's counters since it was created.
type Stats struct {
	// Published counts updates accepted by Publish.
	Published uint64 `json:"published"`
	// Acked counts updates the stream acknowledged, Duplicates those of
	// them it already had (sent again, or by another relay).
	Acked      uint64 `json:"acked"`
	Duplicates uint64 `json:"duplicates"`
	// Republished counts sends after the first: after a switch, a
	// leader election, an ack timeout or an error.
	Republished uint64 `json:"republished"`
	// Timeouts and Errors count publishes that were not acknowledged in
	// AckTimeout or got an error reply; both are sent again.
	Timeouts uint64 `json:"timeouts"`
	Errors   uint64 `json:"errors"`
	// Conflicts counts publishes answered "the stream is storing this
	// message ID right now" (normal with hot-hot relays): sent again
	// 5 ms later, they come back as duplicates.
	Conflicts uint64 `json:"conflicts"`
	// Rejected counts updates the stream refused for good (too large):
	// not stored, each logged.
	Rejected uint64 `json:"rejected"`
	// Fenced counts updates not stored because a newer owner of their
	// source stores the tag (WithFence).
	Fenced uint64 `json:"fenced"`
	// Blocked counts Publish calls that waited for room in the window,
	// BlockedMs the time they waited.
	Blocked   uint64  `json:"blocked"`
	BlockedMs float64 `json:"blockedMs"`
	// Switches counts moves to a new active connection, LeaderElections
	// the stream leader elections that caused a resend.
	Switches        uint64 `json:"switches"`
	LeaderElections uint64 `json:"leaderElections"`
	// Pending and PendingBytes are the window now; OldestPendingMs the
	// age of its oldest update.
	Pending         int     `json:"pending"`
	PendingBytes    int     `json:"pendingBytes"`
	OldestPendingMs float64 `json:"oldestPendingMs"`
	// WindowFull reports Publish blocking now.
	WindowFull bool `json:"windowFull"`
}

// Stats returns the sink's counters.
func (s *Sink) Stats() Stats {
	c := &s.stats
	st := Stats{
		Published: c.published.Load(), Acked: c.acked.Load(), Duplicates: c.duplicates.Load(),
		Republished: c.republished.Load(), Timeouts: c.timeouts.Load(), Errors: c.errors.Load(),
		Conflicts: c.conflicts.Load(), Rejected: c.rejected.Load(), Fenced: c.fenced.Load(), Blocked: c.blocked.Load(),
		BlockedMs: float64(c.blockedNanos.Load()) / 1e6,
		Switches:  c.switches.Load(), LeaderElections: c.leaderResends.Load(),
	}
	s.mu.Lock()
	st.Pending, st.PendingBytes, st.WindowFull = s.count, s.bytes, s.full.on
	if s.head != nil {
		st.OldestPendingMs = float64(time.Since(s.head.queuedAt).Microseconds()) / 1000
	}
	s.mu.Unlock()
	return st
}
