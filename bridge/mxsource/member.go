package mxsource

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/mxgateway"
	"github.com/apbridge/apbridge/wire"
)

// member is one gateway of the source and its current session.
type member struct {
	idx    int
	target string
	client *mxgateway.Client

	// Under Source.mu:
	sess      *mxgateway.Session // nil while the gateway has no session
	gen       uint64             // counts the member's sessions
	kill      context.CancelCauseFunc
	byGateway map[int32]uint32 // gateway item handle -> bridge handle
	// early holds data changes of items whose handle is not known yet:
	// the gateway sends an item's first value as it advises it, which
	// can be before its reply to the subscribe arrives.
	early    map[int32]mxgateway.DataChange
	openedAt time.Time
	lastErr  string // the last open or stream error, logged once
	// resume is the predecessor's state, for the first session (Start).
	resume *Handoff
	// adopted are the items of a predecessor's session resumed, by
	// address, not yet mapped to tags (nil once every one is, or for a
	// new session); while some are not, the data changes of those items
	// are held, in order, until a subscribe of the bridge maps them (see
	// adopt): the bridge may subscribe its tags in more than one call.
	// heldSeq is the last event meanwhile.
	// On a resumed session (resumed) the changes of every item not
	// mapped yet are held so, not only those of the adopted items: a
	// predecessor's record may name fewer items than its session has
	// advised (one recorded before a subscribe's answer), and the
	// gateway sends the others' changes too; a later subscribe of their
	// tags maps them and relays what is held of them first, in order.
	adopted map[string]int32
	resumed bool
	held    []mxgateway.DataChange
	heldSeq uint64
	// lastDone is the last event of the session handled (eventDone, with
	// a handoff store): where a successor may resume it once it is made
	// the active one (handoff.switched).
	lastDone uint64

	lastEvent atomic.Int64 // unix nanoseconds of the session's last event
	// busy counts the subscribe requests of ours running on the session:
	// a health ping would queue behind them and measure them, not the
	// gateway.
	busy atomic.Int32
}

// openTimeout bounds opening and registering a session.
const openTimeout = 10 * time.Second

// maxReconnectDelay caps the doubling wait between failed opens.
const maxReconnectDelay = 30 * time.Second

// errProbe and errSilent are the causes with which the source ends a
// session it has judged dead.
var (
	errProbe  = errors.New("health ping past its deadline")
	errSilent = errors.New("heartbeats missing")
)

// runMember keeps a session open on m's gateway: it opens and registers
// one, streams its events until it ends, and opens the next.
func (s *Source) runMember(m *member) {
	defer s.wg.Done()
	if m.idx != s.first {
		// The primary (or the gateway of a predecessor's session to
		// resume) gets the first chance to be the active: the other
		// opens once its first attempt is over, or after
		// primaryHeadStart.
		t := time.NewTimer(primaryHeadStart)
		select {
		case <-s.primaryTried:
		case <-t.C:
		case <-s.ctx.Done():
		}
		t.Stop()
	}
	delay := s.cfg.ReconnectDelay
	for s.ctx.Err() == nil {
		var (
			sess    *mxgateway.Session
			adopted map[string]int32
			after   uint64 // where the stream starts: 0 for a new session
			err     error
		)
		if st := m.resume; st != nil {
			m.resume = nil
			sess, adopted, after = s.adoptFrom(m, st)
		}
		if sess == nil {
			sess, err = s.open(m)
		}
		if err != nil {
			s.post(memberEvent{kind: evOpenFailed, m: m, err: err})
			s.tried(m)
			if s.waitRetry(m, err, delay) != nil {
				return
			}
			delay = min(delay*2, maxReconnectDelay)
			continue
		}
		sctx, kill := context.WithCancelCause(s.ctx)
		gen := s.attach(m, sess, kill, adopted)
		s.post(memberEvent{kind: evUp, m: m, gen: gen, sess: sess})
		s.tried(m)
		lastSeq := after // the last event received: where a resume starts
		handler := mxgateway.EventHandler{
			Data: func(d mxgateway.DataChange) { s.onData(m, gen, d) },
			Alive: func(seq uint64) {
				m.lastEvent.Store(time.Now().UnixNano())
				if after > 0 && lastSeq == after {
					// The gateway answered the resume with an event.
					s.resumed(m, sess.ID(), after)
				}
				lastSeq = seq
			},
			Gap: func(want, got uint64) {
				s.log.Warn().Str("endpoint", m.target).Uint64("expected", want).Uint64("got", got).Msg("gateway event sequence skipped: events were lost")
			},
			Done: func(seq uint64) { s.eventDone(m, gen, seq) },
		}
		err = sess.EventsAfter(sctx, after, handler)
		resumeFailed := false
		if after > 0 && lastSeq == after && (errors.Is(err, mxgateway.ErrSessionLost) || errors.Is(err, mxgateway.ErrCannotResume)) {
			// The gateway forgot the session, or no longer holds the
			// events: a new session, subscribed again.
			resumeFailed = true
			s.resumeFailed(m, sess.ID(), err)
		}
		resumeUntil := time.Now().Add(resumeWindow)
		for time.Now().Before(resumeUntil) && s.resumable(sctx, m, sess, err) {
			// A blip: the gateway kept the session and sends again what
			// was lost in transit. No reopen, no resubscribe, no switch.
			before := lastSeq
			s.log.Info().Str("endpoint", m.target).Uint64("after", before).AnErr("cause", err).Msg("gateway event stream broke: resuming the session's stream")
			s.countResume()
			err = sess.EventsAfter(sctx, before, handler)
			if lastSeq != before {
				// It streamed again: a later break has its own window.
				resumeUntil = time.Now().Add(resumeWindow)
			} else if err != nil && !errors.Is(err, mxgateway.ErrDisconnected) {
				s.log.Warn().Str("endpoint", m.target).Err(err).Msg("gateway event stream not resumed")
			}
		}
		if cause := context.Cause(sctx); s.ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		kill(nil)
		keep := s.keepSession(m, gen)
		lived := s.detach(m, gen)
		s.post(memberEvent{kind: evDown, m: m, gen: gen, err: err})
		// Best effort, and off this goroutine: on a gateway that is gone
		// the call waits for the channel, and the next session must not.
		// A gateway that keeps broken sessions for a resume would keep
		// this one until its own timeout otherwise. The session a
		// successor is to resume stays open.
		if !keep {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				cctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), time.Second)
				defer cancel()
				sess.Close(cctx)
			}()
		}
		if resumeFailed {
			delay = s.cfg.ReconnectDelay
			continue
		}
		// A session that lived is a gateway that works: the backoff starts
		// over. One that ends as soon as it opens keeps backing off, so
		// that a gateway that keeps ending sessions is not hammered.
		if lived > stableSession {
			delay = s.cfg.ReconnectDelay
			if errors.Is(err, mxgateway.ErrSessionEnded) || errors.Is(err, mxgateway.ErrSessionLost) {
				// Ended in order, or forgotten by a gateway that
				// restarted and answers again: open again at once.
				continue
			}
		}
		if s.waitRetry(m, err, delay) != nil {
			return
		}
		delay = min(delay*2, maxReconnectDelay)
	}
}

// waitRetry waits before m's next open after err: the jittered delay,
// but when the gateway was unreachable, only until its channel is
// connected again, so that a gateway back from a restart is used at once.
// A gateway that is reachable but refused waits the whole delay.
func (s *Source) waitRetry(m *member, err error, delay time.Duration) error {
	if !errors.Is(err, mxgateway.ErrDisconnected) {
		return ctxtime.Sleep(s.ctx, jitter(delay))
	}
	ctx, cancel := context.WithTimeout(s.ctx, jitter(delay))
	defer cancel()
	if m.client.WaitReady(ctx) == nil {
		// Connected: a short pause, so that a gateway that accepts
		// connections and then drops them is not hammered.
		return ctxtime.Sleep(s.ctx, min(delay, 50*time.Millisecond))
	}
	return s.ctx.Err()
}

// resumeWindow bounds how long a broken stream waits for its gateway's
// channel to reconnect before the session is given up (and the standby
// promoted). A gateway that is down refuses the connection at once.
const resumeWindow = 2 * time.Second

// resumable reports whether the stream of sess, which ended with err, can
// resume: the transport broke (not the session), the gateway resumes
// streams, and its channel connects again within resumeWindow.
func (s *Source) resumable(sctx context.Context, m *member, sess *mxgateway.Session, err error) bool {
	if sctx.Err() != nil || !errors.Is(err, mxgateway.ErrDisconnected) || !sess.Has(mxgateway.CapEventResume) {
		return false
	}
	ctx, cancel := context.WithTimeout(sctx, resumeWindow)
	defer cancel()
	return m.client.Reconnect(ctx) == nil
}

func (s *Source) countResume() {
	s.mu.Lock()
	s.stats.Resumes++
	s.mu.Unlock()
}

// stableSession is how long a session must have lived for its end to
// restart the reconnect backoff.
const stableSession = time.Second

// primaryHeadStart is how long the backup waits at start for the
// primary's first attempt.
const primaryHeadStart = 2 * time.Second

// tried records that m made an attempt; the primary's first lets the
// backup open. Its event is posted already, so the supervisor sees the
// primary up before the backup.
func (s *Source) tried(m *member) {
	if m.idx == s.first {
		s.primaryOnce.Do(func() { close(s.primaryTried) })
	}
}

// jitter draws a delay from [d/2, d], so that relays do not reconnect in
// step.
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// open opens and registers a session on m's gateway.
func (s *Source) open(m *member) (*mxgateway.Session, error) {
	ctx, cancel := context.WithTimeout(s.ctx, openTimeout)
	defer cancel()
	sess, err := m.client.Open(ctx, mxgateway.SessionOptions{
		ClientName: s.cfg.ClientName, WriteUserID: s.cfg.WriteUserID, CommandTimeout: s.cfg.CommandTimeout})
	if err != nil {
		return nil, err
	}
	if err := sess.Register(ctx, s.cfg.ClientName); err != nil {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(s.ctx), time.Second)
		sess.Close(cctx)
		ccancel()
		return nil, err
	}
	return sess, nil
}

// attach makes sess m's session; its items are yet to be added, or, for
// a predecessor's session, adopted.
func (s *Source) attach(m *member, sess *mxgateway.Session, kill context.CancelCauseFunc, adopted map[string]int32) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m.gen++
	m.adopted, m.resumed, m.held, m.heldSeq = adopted, adopted != nil, nil, 0
	m.lastDone = 0
	m.sess, m.kill, m.openedAt = sess, kill, time.Now()
	m.byGateway = map[int32]uint32{}
	m.early = map[int32]mxgateway.DataChange{}
	m.lastEvent.Store(time.Now().UnixNano())
	if adopted == nil {
		s.stats.SessionsOpened++
	}
	for _, it := range s.items {
		it.handle[m.idx], it.advised[m.idx], it.last[m.idx], it.sent[m.idx] = 0, false, nil, 0
	}
	return m.gen
}

// detach ends m's session gen and returns how long it lived.
func (s *Source) detach(m *member, gen uint64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.gen != gen || m.sess == nil {
		return 0
	}
	m.sess, m.kill = nil, nil
	m.adopted, m.resumed, m.held = nil, false, nil
	for _, it := range s.items {
		it.handle[m.idx], it.advised[m.idx] = 0, false
	}
	return time.Since(m.openedAt)
}

// endSession ends m's session gen with cause (the source judged it dead):
// its event stream stops and runMember reports it down.
func (s *Source) endSession(m *member, gen uint64, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.gen == gen && m.kill != nil {
		m.kill(cause)
	}
}

// onData runs on m's event goroutine: a data change of session gen.
func (s *Source) onData(m *member, gen uint64, d mxgateway.DataChange) {
	s.mu.Lock()
	if m.gen != gen {
		s.mu.Unlock()
		return
	}
	handle, ok := m.byGateway[d.Handle]
	if !ok && m.resumed {
		// An item of a predecessor's session, mapped when the bridge
		// subscribes its tag; until then its changes wait, in order.
		if len(m.held) < maxEarly {
			m.held = append(m.held, d)
		}
		s.mu.Unlock()
		return
	}
	if ok {
		if it := s.items[handle]; it != nil {
			it.last[m.idx] = &d
		}
	} else if len(m.early) < maxEarly {
		m.early[d.Handle] = d
	}
	active := s.active == m.idx
	s.mu.Unlock()
	if !ok || !active {
		return
	}
	s.emit1(m, gen, handle, d)
}

// takeHeldLocked takes the changes of the items mapped now out of m.held,
// in order, each made its item's last; s.mu is held. The caller relays
// them, with s.emitMu held since before the mapping, so that no change of
// those items comes in between.
func (s *Source) takeHeldLocked(m *member) []early {
	var out []early
	keep := m.held[:0]
	for _, d := range m.held {
		handle, ok := m.byGateway[d.Handle]
		if !ok {
			keep = append(keep, d)
			continue
		}
		if it := s.items[handle]; it != nil {
			dd := d
			it.last[m.idx] = &dd
		}
		out = append(out, early{handle, d})
	}
	clear(m.held[len(keep):])
	m.held = keep
	return out
}

// maxEarly bounds the data changes held for items not yet mapped.
const maxEarly = 100_000

// early is a data change that came before its item's handle was known.
type early struct {
	handle uint32
	d      mxgateway.DataChange
}

// replayEarly relays data changes that came before their items' handles
// were known, unless a newer one has come since.
func (s *Source) replayEarly(m *member, gen uint64, es []early) {
	for _, e := range es {
		s.mu.Lock()
		it := s.items[e.handle]
		stale := it == nil || m.gen != gen || (it.last[m.idx] != nil && it.last[m.idx].Seq >= e.d.Seq)
		if !stale {
			d := e.d
			it.last[m.idx] = &d
		}
		active := s.active == m.idx
		s.mu.Unlock()
		if !stale && active {
			s.emit1(m, gen, e.handle, e.d)
		}
	}
}

// emit1 hands one data change of m's session gen to the bridge, if that
// session is still the active one.
func (s *Source) emit1(m *member, gen uint64, handle uint32, d mxgateway.DataChange) {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	s.emitLocked(m, gen, handle, d)
}

// emitLocked is emit1 with s.emitMu held.
func (s *Source) emitLocked(m *member, gen uint64, handle uint32, d mxgateway.DataChange) {
	// Again under emitMu: a promotion may have moved the active since.
	s.mu.Lock()
	active := s.active == m.idx && m.gen == gen
	h := s.h
	if it := s.items[handle]; active && it != nil {
		// Once per change, and never an older one after a newer: a hot
		// promotion may have relayed it already from the standby's last
		// values, and a standby that lagged the old active still has
		// changes queued that the old active delivered. A refresh is the
		// exception: it carries every tag's current value, repeats
		// included.
		refreshing := s.refresh != nil && s.refresh.pending[handle]
		if (d.Seq != 0 && d.Seq <= it.sent[m.idx]) || it.older(d) || (!refreshing && it.seen(d)) {
			active = false
		} else {
			it.sent[m.idx] = d.Seq
			it.relayed(d)
		}
	}
	s.mu.Unlock()
	if !active {
		return
	}
	h.Update(handle, toUpdate(d))
	if r := s.refresh; r != nil {
		delete(r.pending, handle)
		if len(r.pending) == 0 {
			s.refresh = nil
			h.RefreshEnd()
		}
	}
}

// toUpdate turns a gateway data change into the bridge's update: the
// quality becomes a status code, the gateway's timestamp the source time.
func toUpdate(d mxgateway.DataChange) wire.Update {
	u := wire.Update{Status: statusOf(d.Quality), SourceTime: d.Timestamp, ServerTime: d.Timestamp}
	if d.Value == nil {
		return u
	}
	if _, ok := wire.TypeOf(d.Value); !ok {
		return wire.Unsupported("", d.Value, u.SourceTime, u.ServerTime)
	}
	u.Value = d.Value
	return u
}

// eventDone runs on m's event goroutine after each event of session gen:
// with a state file, the active session's progress is recorded.
func (s *Source) eventDone(m *member, gen uint64, seq uint64) {
	if s.ho == nil || seq == 0 {
		return
	}
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	s.mu.Lock()
	ok := s.active == m.idx && m.gen == gen
	if m.gen == gen {
		m.lastDone = seq
	}
	if m.gen == gen && (m.adopted != nil || len(m.held) > 0) {
		// Changes are held behind this event: a successor must find
		// them after the sequence recorded.
		m.heldSeq, ok = seq, false
	}
	sess := m.sess
	s.mu.Unlock()
	if ok && sess != nil {
		s.ho.handled(m, gen, sess, seq)
	}
}

// keepSession reports whether m's session gen, ending because the source
// stops, stays open on the gateway: every session of an abandoned source
// (a dead process closes nothing), and with a state file the one it names.
func (s *Source) keepSession(m *member, gen uint64) bool {
	if s.ctx.Err() == nil {
		return false
	}
	if s.abandoned.Load() {
		return true
	}
	if s.ho == nil {
		return false
	}
	s.ho.mu.Lock()
	defer s.ho.mu.Unlock()
	return s.ho.m == m && s.ho.gen == gen
}

// recordable reports whether m's session, made the active one, may be
// recorded at once (handoff.switched): it adopts no predecessor's items
// (adopt records those), and no change waits to be relayed (held, or
// early before its subscribe's answer), for the record to wait for as it
// does for the session's first stored event. s.mu is held.
func (m *member) recordable() bool {
	return m.adopted == nil && len(m.held) == 0 && len(m.early) == 0
}
