package jetstreamsink

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// sendingLocked marks e as sent on the current link and returns the link.
func (s *Sink) sendingLocked(e *jsEntry, now time.Time) *jsLink {
	if s.fence != "" {
		s.expectLocked(e)
	}
	e.state = stSent
	e.sentJS = s.link.js
	e.sentAt = now
	return s.link
}

// errNotConnected holds a send while the link's connection is away (it
// comes back, or the ApConnection switches): a publish buffered by
// nats.go for a reconnect would only be sent again after its ack timeout.
var errNotConnected = errors.New("not connected")

func (s *Sink) send(l *jsLink, e *jsEntry) {
	for s.fence != "" && e != nil {
		s.mu.Lock()
		if s.byMsg[e.msg] != e || e.state != stSent || !s.fencedLocked(e) {
			s.mu.Unlock()
			break
		}
		next, link := s.settleFencedLocked(e, s.subjects[e.subject].fencedBy)
		s.mu.Unlock()
		e, l = next, link
	}
	if e == nil {
		return
	}
	if !l.nc.IsConnected() {
		s.onErr(l.js, e.msg, errNotConnected)
		return
	}
	if _, err := l.js.PublishMsgAsync(e.msg); err != nil {
		s.onErr(l.js, e.msg, err)
	}
}

// onAck is called by nats.go's jetstream package for every acknowledgement
// (on the reply subscription's goroutine, without its locks held): from
// any link, the first one settles the update.
func (s *Sink) onAck(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	s.mu.Lock()
	e := s.byMsg[m]
	if e == nil {
		s.mu.Unlock()
		return
	}
	s.stats.acked.Add(1)
	if ack.Duplicate {
		s.stats.duplicates.Add(1)
	}
	s.storedLocked(e, ack.Sequence)
	next, link := s.doneLocked(e)
	s.mu.Unlock()
	if next != nil {
		s.send(link, next)
	}
}

// doneLocked takes a settled update out of the window and returns its
// tag's next update, now marked sent on the returned link.
func (s *Sink) doneLocked(e *jsEntry) (*jsEntry, *jsLink) {
	e.state = stDone
	delete(s.byMsg, e.msg)
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
	s.count--
	s.bytes -= e.size
	if s.waiters > 0 {
		s.space.Broadcast()
	}
	if s.full.on && s.count <= s.cfg.MaxPending/2 && s.bytes <= s.cfg.MaxPendingBytes/2 {
		s.windowDrainedLocked(time.Now())
	}
	if len(s.flushers) > 0 {
		low := uint64(1<<64 - 1)
		if s.head != nil {
			low = s.head.seq
		}
		kept := s.flushers[:0]
		for _, f := range s.flushers {
			if f.upTo < low {
				close(f.ch)
			} else {
				kept = append(kept, f)
			}
		}
		clear(s.flushers[len(kept):])
		s.flushers = kept
	}
	q := s.subjects[e.subject]
	n := e.nextSame
	e.nextSame = nil
	q.head = n
	if n == nil {
		q.tail = nil
		return nil, nil
	}
	if s.closed {
		return nil, nil
	}
	return n, s.sendingLocked(n, time.Now())
}

// onErr is called for a publish that failed: by nats.go's jetstream
// package (an error reply, an ack timeout with its own lock held, a lost
// connection) and by send. It never sends: the pump does.
func (s *Sink) onErr(js jetstream.JetStream, m *nats.Msg, err error) {
	now := time.Now()
	s.mu.Lock()
	e := s.byMsg[m]
	// Stale: settled already, or sent again since on another context.
	if e == nil || e.state != stSent || e.sentJS != js {
		s.mu.Unlock()
		return
	}
	if permanent(err) {
		s.stats.rejected.Add(1)
		next, _ := s.doneLocked(e)
		if next != nil { // the pump sends it
			next.state = stRetry
			s.retry = append(s.retry, next)
		}
		s.mu.Unlock()
		s.log.Error().Err(err).Str("subject", e.subject).Str("msg_id", m.Header.Get(jetstream.MsgIDHeader)).
			Msg("the stream rejected an update for good: it is not stored")
		s.wake()
		return
	}
	e.state = stRetry
	if errors.Is(err, errNotConnected) {
		e.retryAt = now.Add(100 * time.Millisecond)
		s.retry = append(s.retry, e)
		s.mu.Unlock()
		s.wake()
		return
	}
	if e.token != 0 && wrongLast(err) {
		// Another publisher stored the tag since, or is storing it right
		// now: whose update it was decides (see the fence). Looked up at
		// once the first time, then after a growing wait, so that a
		// subject the stream keeps refusing is not looked up in a loop.
		e.attempts++
		e.check, e.retryAt = true, now
		if e.attempts > 1 {
			e.retryAt = now.Add(backoff(e.attempts - 1))
		}
		s.retry = append(s.retry, e)
		s.mu.Unlock()
		s.wake()
		return
	}
	e.attempts++
	if conflict(err) {
		// Another copy of this update (from the other hot-hot relay, or
		// sent again) is being stored right now: ask again shortly, and
		// the answer will be "duplicate".
		s.stats.conflicts.Add(1)
		e.retryAt = now.Add(5 * time.Millisecond)
		s.retry = append(s.retry, e)
		s.mu.Unlock()
		s.wake()
		return
	}
	if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		s.stats.timeouts.Add(1)
		e.retryAt = now // the wait is over already
	} else {
		s.stats.errors.Add(1)
		e.retryAt = now.Add(backoff(e.attempts))
	}
	s.retry = append(s.retry, e)
	ok, held := s.errLog.allow(now, 10*time.Second)
	s.mu.Unlock()
	if ok {
		s.log.Warn().Err(err).Str("subject", e.subject).Int("held_back", held).
			Msg("publish not acknowledged by the stream: sending it again (one line per 10 s)")
	}
	s.wake()
}

// permanent reports errors that sending again cannot cure: the message is
// too large for the stream or the server.
func permanent(err error) bool {
	// 10054, 10097: the message or its header exceeds the stream's maximum.
	return errors.Is(err, nats.ErrMaxPayload) || publishErrorIs(err, 10054, 10097)
}

// conflict reports the stream's answer to a message whose ID it is
// storing at this moment.
func conflict(err error) bool { return publishErrorIs(err, 10158) }

// publishErrorIs reports whether err is the stream's error reply to a
// publish with one of the given JetStream error codes.
func publishErrorIs(err error, codes ...jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && slices.Contains(codes, apiErr.ErrorCode)
}

// backoff is the wait before the n-th retry after an error reply: 20 ms
// doubling to 1 s.
func backoff(n int) time.Duration {
	d := 20 * time.Millisecond
	for i := 1; i < n && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

func (s *Sink) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// pump sends what is due for a retry, in publish order, and keeps the
// link on the ApConnection's active connection.
func (s *Sink) pump() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	check := time.NewTicker(time.Second)
	defer check.Stop()
	var due, checks []*jsEntry
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		now := time.Now()
		var next time.Time
		due = due[:0]
		kept := s.retry[:0]
		for _, e := range s.retry {
			switch {
			case e.state != stRetry:
			case !e.retryAt.After(now):
				due = append(due, e)
			default:
				kept = append(kept, e)
				if next.IsZero() || e.retryAt.Before(next) {
					next = e.retryAt
				}
			}
		}
		clear(s.retry[len(kept):])
		s.retry = kept
		slices.SortFunc(due, func(a, b *jsEntry) int { return compareSeq(a.seq, b.seq) })
		link := s.link
		if len(due) > 0 && !link.nc.IsConnected() {
			// Held until the connection is back or replaced.
			later := now.Add(100 * time.Millisecond)
			for _, e := range due {
				e.retryAt = later
				s.retry = append(s.retry, e)
			}
			due = due[:0]
			if next.IsZero() || later.Before(next) {
				next = later
			}
		}
		checks = checks[:0]
		sending := due[:0]
		for _, e := range due {
			if e.check {
				checks = append(checks, e)
				continue
			}
			s.sendingLocked(e, now)
			sending = append(sending, e)
		}
		s.mu.Unlock()
		for _, e := range sending {
			s.stats.republished.Add(1)
			s.send(link, e)
		}
		for _, e := range checks {
			s.startResolve(link, e)
		}
		clear(due)
		clear(checks)
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-s.done:
			return
		case <-s.kick:
		case <-timer.C:
		case <-check.C:
			s.relink()
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// windowFullLocked starts or continues a full-window episode: one log
// line when it starts, at most one a minute.
func (s *Sink) windowFullLocked(now time.Time) {
	f := &s.full
	f.blocked++
	if f.on {
		return
	}
	f.on, f.since, f.blocked = true, now, 1
	if !f.lastLog.IsZero() && now.Sub(f.lastLog) < time.Minute {
		f.unlogged++
		return
	}
	f.lastLog = now
	s.log.Warn().Int("pending", s.count).Int("pending_bytes", s.bytes).Int("maxPending", s.cfg.MaxPending).
		Int("maxPendingBytes", s.cfg.MaxPendingBytes).Int("episodes_not_logged", f.unlogged).
		Msg("pending window full: publishing blocks until the stream acknowledges (backpressure on the source)")
	f.unlogged = 0
}

func (s *Sink) windowDrainedLocked(now time.Time) {
	f := &s.full
	f.on = false
	if f.lastLog.Before(f.since) || f.lastLog.IsZero() {
		return // this episode was not logged: neither is its end
	}
	s.log.Info().Dur("full_for_ms", now.Sub(f.since)).Int("publishes_blocked", f.blocked).
		Msg("pending window drained: backpressure released")
}

// jsLink is a JetStream context on one active nats.Conn.
type jsLink struct {
	gen uint64
	nc  *nats.Conn
	js  jetstream.JetStream
}

func (s *Sink) newLink(nc *nats.Conn) (*jsLink, error) {
	// Only publishes go through this context, to the tags' own subjects:
	// the stream's domain does not enter (the API requests are the
	// sink's own, APISubject).
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncAckHandler(s.onAck),
		jetstream.WithPublishAsyncErrHandler(s.onErr),
		// The window bounds what is in flight; this only has to stay out
		// of the way (an entry can have two publishes outstanding after a
		// leader election).
		jetstream.WithPublishAsyncMaxPending(2*s.cfg.MaxPending+64),
		jetstream.WithPublishAsyncTimeout(s.cfg.AckTimeout))
	if err != nil {
		return nil, fmt.Errorf("bridge: jetstream: %w", err)
	}
	return &jsLink{nc: nc, js: js}, nil
}

func (s *Sink) onConnEvent(e apconn.Event) {
	switch e.Kind {
	case apconn.EventSwitched:
		s.relink()
	case apconn.EventReconnected:
		// The same nats.Conn is back: what failed while it was away is
		// sent now rather than at its backoff.
		s.mu.Lock()
		for _, r := range s.retry {
			r.retryAt = time.Time{}
		}
		s.mu.Unlock()
		s.wake()
	}
}

// relink moves publishing to the ApConnection's active nats.Conn if it
// changed, and sends every unacknowledged update again on it, in order.
func (s *Sink) relink() {
	nc := s.conn.Active()
	if nc == nil {
		return
	}
	s.mu.Lock()
	if s.closed || s.link.nc == nc {
		s.mu.Unlock()
		return
	}
	l, err := s.newLink(nc)
	if err != nil {
		s.mu.Unlock()
		s.log.Error().Err(err).Msg("no JetStream context on the new active connection")
		return
	}
	s.gen++
	l.gen = s.gen
	s.link = l
	n := s.resendAllLocked()
	s.mu.Unlock()
	s.stats.switches.Add(1)
	s.log.Info().Str("server", nc.ConnectedServerName()).Int("republishing", n).
		Msg("publishing moved to the new active connection: unacknowledged updates are sent again")
	s.wake()
}

// resendAllLocked marks every update in flight for an immediate resend
// and returns how many.
func (s *Sink) resendAllLocked() int {
	n := 0
	for e := s.head; e != nil; e = e.next {
		switch e.state {
		case stSent:
			e.state = stRetry
			e.retryAt = time.Time{}
			s.retry = append(s.retry, e)
			n++
		case stRetry:
			e.retryAt = time.Time{}
		}
	}
	return n
}

func (s *Sink) onLeaderElected(m *nats.Msg) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	n := s.resendAllLocked()
	s.mu.Unlock()
	s.stats.leaderResends.Add(1)
	s.log.Info().Int("republishing", n).Msg("stream leader elected: unacknowledged updates are sent again")
	s.wake()
}
