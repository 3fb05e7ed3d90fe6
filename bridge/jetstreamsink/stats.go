package jetstreamsink

import "time"

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
