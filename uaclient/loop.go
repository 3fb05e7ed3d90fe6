package uaclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apbridge/apbridge/servicelevel"

	"github.com/gopcua/opcua/ua"
)

// call hands an API request to the loop.
func (p *Pair) call(ctx context.Context, ev event) error {
	select {
	case p.evc <- ev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.loopDone:
		return ErrClosed
	}
}

// post hands a session's event to the loop; false once the loop is gone.
func (p *Pair) post(ev event) bool {
	select {
	case p.evc <- ev:
		return true
	case <-p.loopDone:
		return false
	}
}

type event any

type (
	evConnected struct {
		s   *session
		err error
	}
	evPublish struct {
		s   *session
		sub uint32
		publishAnswer
		status       ua.StatusCode
		statusChange bool
		at           time.Time
	}
	evRepublished struct {
		s       *session
		sub     uint32
		answers []republished // in the order asked
	}
	evSessionErr struct {
		s   *session
		err error
	}
	evRead struct {
		s     *session
		kind  readKind
		probe servicelevel.ProbeID
		dv    *ua.DataValue
		err   error
	}
	evReconciled struct {
		s           *session
		version     uint64
		status      map[uint32]ua.StatusCode
		snapshotted bool // every snapshot part has been posted
		err         error
		items       []HandoffItem // the items now, for the Handoff
	}
	// evSnapshotPart is one batch of a snapshot: the values of the
	// desire's items from start on, read as soon as the batch was in
	// place.
	evSnapshotPart struct {
		s       *session
		version uint64
		start   int
		values  []snapValue
	}
	evAddItems struct {
		items []Item
		w     *waiter
	}
	evRemoveItems struct {
		handles []uint32
		w       *waiter
	}
	evWrite struct {
		t     writeTarget
		reply chan writeGrant
	}
)

// loop owns the Policy, the sessions and the items: every decision is
// taken here, one event at a time, and no I/O is done here, so that no
// server, link or handler can hold a decision up.
func (p *Pair) loop() {
	defer close(p.loopDone)
	p.feed(p.pol.Start(time.Now()))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.settle()
		p.publishStatus()
		wake := time.Hour
		if at, ok := p.nextWake(); ok {
			wake = max(time.Until(at), 0)
		}
		timer.Reset(wake)
		select {
		case <-p.stop:
			p.shutdown()
			return
		case ev := <-p.evc:
			p.handle(ev)
		case <-timer.C:
			// Events that arrived meanwhile go first: a heartbeat waiting
			// in the queue is not a gap.
			for n := len(p.evc); n > 0; n-- {
				p.handle(<-p.evc)
			}
			p.onTimer(time.Now())
		}
	}
}

// settle runs what the last event made due: queued follow-ups, Policy
// deadlines, the standby's connect.
func (p *Pair) settle() {
	for range 1000 {
		if len(p.later) > 0 {
			f := p.later[0]
			p.later = p.later[1:]
			f()
			continue
		}
		now := time.Now()
		if at, ok := p.pol.NextDeadline(); ok && !at.After(now) && !at.Equal(p.tickedAt) {
			d := p.pol.Tick(now)
			if d.Action == servicelevel.ActionNone && len(d.Observations) == 0 {
				p.tickedAt = at
			}
			p.feed(d)
			continue
		}
		break
	}
	p.ensureStandby(time.Now())
}

func (p *Pair) nextWake() (time.Time, bool) {
	var at time.Time
	ok := false
	consider := func(t time.Time) {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	if d, has := p.pol.NextDeadline(); has && !d.Equal(p.tickedAt) {
		consider(d)
	}
	for _, s := range p.sess {
		if s == nil || !s.up() {
			continue
		}
		consider(s.lastBeat.Add(p.set.HeartbeatTimeout))
		consider(s.lastData.Add(s.conn.dataQuiet))
		if !s.polling {
			consider(s.nextPoll)
		}
		for _, sb := range s.subs {
			if d, has := sb.deadline(); has {
				consider(d)
			}
		}
		if s.resumed != nil {
			consider(s.resumed.since.Add(recoverBound))
		}
	}
	if p.probeWait.id != 0 {
		consider(p.probeWait.deadline)
	}
	if p.hold != nil {
		consider(p.hold.until)
	}
	if !p.single && p.sess[p.pol.Active().Other()] == nil {
		consider(p.standbyAt)
	}
	if at, due := p.discoveryDue(); due {
		consider(at)
	}
	return at, ok
}

func (p *Pair) handle(ev event) {
	now := time.Now()
	switch ev := ev.(type) {
	case evConnected:
		p.onConnected(ev, now)
	case evPublish:
		p.onPublish(ev, now)
	case evRepublished:
		p.onRepublished(ev, now)
	case evSessionErr:
		if !ev.s.dead() {
			p.sessionLost(ev.s, ev.err)
		}
	case evRead:
		p.onRead(ev, now)
	case evReconciled:
		p.onReconciled(ev, now)
	case evSnapshotPart:
		p.onSnapshotPart(ev, now)
	case evAddItems:
		p.onAddItems(ev)
	case evRemoveItems:
		p.onRemoveItems(ev)
	case evWrite:
		p.onWrite(ev)
	case evPartner:
		p.onPartner(ev, now)
	case evStored:
		p.onStored(ev)
	}
}

// feed executes a Policy decision and reports what it observed.
func (p *Pair) feed(d servicelevel.Decision) {
	for _, o := range d.Observations {
		p.observe(o)
	}
	now := time.Now()
	switch d.Action {
	case servicelevel.ActionProbe:
		p.probe(d, now)
	case servicelevel.ActionSwitch:
		p.failovers++
		p.switchAt = now
		p.emit(Event{Kind: EventFailover, At: now, Endpoint: d.From, Target: d.To, Role: RoleActive,
			Level: d.ActiveLevel, PeerLevel: d.PeerLevel, Cause: d.Cause, Attempt: d.FailedAttempts, Message: d.String()})
		p.connectActive(d, now)
	case servicelevel.ActionConnect:
		p.switchAt = now
		p.connectActive(d, now)
	case servicelevel.ActionNone:
		if d.Cause != servicelevel.CauseNone {
			p.emit(Event{Kind: EventStay, At: now, Endpoint: d.From, Role: RoleActive, Level: d.ActiveLevel,
				PeerLevel: d.PeerLevel, Cause: d.Cause, Message: d.String()})
		}
	}
}

func (p *Pair) onTimer(now time.Time) {
	if h := p.hold; h != nil && h.expired(now) {
		p.releaseHold(false)
	}
	// While the handlers are behind, the publishers hold back and the
	// subscriptions are silent on purpose: the gap checks stand down and
	// the polls alone watch the links.
	holding := p.out.full() || p.store.full()
	for _, s := range p.sess {
		if s == nil || !s.up() {
			continue
		}
		if holding {
			s.lastBeat, s.lastData = now, now
		}
		if gap := now.Sub(s.lastBeat); gap >= p.set.HeartbeatTimeout {
			p.sessionLost(s, fmt.Errorf("heartbeat gap: nothing from the health subscription for %v (limit %v)",
				gap.Round(time.Millisecond), p.set.HeartbeatTimeout))
			continue
		}
		if gap := now.Sub(s.lastData); gap >= s.conn.dataQuiet {
			p.sessionLost(s, fmt.Errorf("the data subscription is silent: no answer for %v (limit %v)",
				gap.Round(time.Millisecond), s.conn.dataQuiet))
			continue
		}
		p.recoverGaps(s, now)
		p.checkRecovered(s, now)
		if !s.polling && !now.Before(s.nextPoll) {
			s.nextPoll = now.Add(p.set.PollInterval)
			if s.conn.read(readPoll, 0) {
				s.polling = true
			}
		}
	}
	if w := p.probeWait; w.id != 0 && !now.Before(w.deadline) {
		p.probeWait = probeWait{}
		p.feed(p.pol.ProbeResult(now, w.id, servicelevel.Unknown()))
	}
	if at, due := p.discoveryDue(); due && !now.Before(at) {
		p.startDiscovery(p.sess[servicelevel.Primary], now)
	}
}

// waiter is an AddItems or RemoveItems call waiting for the active's
// worker to reach its desire.
type waiter struct {
	s       *session
	version uint64
	add     []int // indexes into results of the items added
	specs   []*itemSpec
	results []ItemResult
	reply   chan []ItemResult
	done    chan error // RemoveItems
	errs    []error
}

func (p *Pair) onAddItems(ev evAddItems) {
	w := ev.w
	p.releaseAdopted()
	w.results, w.specs = p.items.register(ev.items, &p.set)
	for i := range w.results {
		if w.results[i].Err == nil {
			w.add = append(w.add, i)
		}
	}
	target := p.activating
	if target == nil {
		target = p.serving
	}
	if len(w.add) == 0 || target == nil {
		if len(w.add) > 0 {
			p.pushDesires()
		}
		p.publishStatus()
		w.reply <- w.results
		return
	}
	p.pushDesires()
	w.s, w.version = target, target.wantVer
	p.waiters = append(p.waiters, w)
}

func (p *Pair) onRemoveItems(ev evRemoveItems) {
	w := ev.w
	w.errs = p.items.unregister(ev.handles)
	target := p.activating
	if target == nil {
		target = p.serving
	}
	p.pushDesires()
	if target == nil {
		p.publishStatus()
		w.done <- errors.Join(w.errs...)
		return
	}
	w.s, w.version = target, target.wantVer
	p.waiters = append(p.waiters, w)
}

// answerWaiters completes the calls that waited for s to reach a desire.
func (p *Pair) answerWaiters(s *session, ev evReconciled) {
	keep := p.waiters[:0]
	dropped := false
	var done []*waiter
	for _, w := range p.waiters {
		if w.s != s || ev.version < w.version {
			keep = append(keep, w)
			continue
		}
		done = append(done, w)
		if w.done != nil {
			continue
		}
		for j, i := range w.add {
			r, spec := &w.results[i], w.specs[j]
			code, ok := ev.status[r.Handle]
			switch {
			case !ok:
				// Removed again before it was created.
			case code == ua.StatusOK:
				r.Status = ua.StatusOK
			default:
				r.Status = code
				r.Err = fmt.Errorf("item %d (%s): rejected by %s: %w", r.Handle, spec.node, s.ep, code)
				if p.items[r.Handle] == spec {
					delete(p.items, r.Handle)
					dropped = true
				}
			}
		}
	}
	clear(p.waiters[len(keep):])
	p.waiters = keep
	if dropped {
		p.pushDesires()
	}
	p.replyAll(done)
}

// replyAll answers finished calls, after publishing the status, so that
// Status agrees with what a call that returned has done.
func (p *Pair) replyAll(done []*waiter) {
	if len(done) == 0 {
		return
	}
	p.publishStatus()
	for _, w := range done {
		if w.done != nil {
			w.done <- errors.Join(w.errs...)
		} else {
			w.reply <- w.results
		}
	}
}

// releaseWaiters answers the calls that waited for s, which is gone: the
// items stay added and are created with the next session.
func (p *Pair) releaseWaiters(s *session) {
	keep := p.waiters[:0]
	var done []*waiter
	for _, w := range p.waiters {
		if w.s != s {
			keep = append(keep, w)
			continue
		}
		done = append(done, w)
	}
	clear(p.waiters[len(keep):])
	p.waiters = keep
	p.replyAll(done)
}

type writeTarget struct {
	handle uint32
	node   string
	byNode bool
}

type writeGrant struct {
	c    *conn // the active session's conn, acquired for the write
	node *ua.NodeID
	err  error
}

func (p *Pair) onWrite(ev evWrite) {
	refuse := func(l servicelevel.Level, cause error, reason string) {
		ev.reply <- writeGrant{err: &WriteRefusedError{Endpoint: p.pol.Active(), Level: l, Err: cause, Reason: reason}}
	}
	s := p.serving
	switch {
	case s == nil || s.dead():
		refuse(servicelevel.Unknown(), ErrNoSession, "no endpoint carries the data")
		return
	case p.activating != nil || s.ep != p.pol.Active():
		refuse(s.level, ErrNoSession, fmt.Sprintf("a switch to %s is in progress", p.pol.Active()))
		return
	case !s.level.Healthy():
		refuse(s.level, ErrNotHealthy, fmt.Sprintf("%s reports %s: only a Healthy server (200 or more) takes writes", s.ep, levelText(s.level, s.levelProblem)))
		return
	}
	var node *ua.NodeID
	if ev.t.byNode {
		id, err := ParseNodeID(strings.TrimSpace(ev.t.node))
		var n *ua.NodeID
		if err == nil {
			n, err = id.Resolve(s.conn.ns)
		}
		if err != nil {
			ev.reply <- writeGrant{err: fmt.Errorf("uaclient: write: node ID %q: %v", ev.t.node, err)}
			return
		}
		node = n
	} else {
		it := p.items[ev.t.handle]
		if it == nil {
			ev.reply <- writeGrant{err: fmt.Errorf("uaclient: write: item %d: %w", ev.t.handle, ErrUnknownHandle)}
			return
		}
		n, err := it.node.Resolve(s.conn.ns)
		if err != nil {
			ev.reply <- writeGrant{err: fmt.Errorf("uaclient: write: item %d: %w", ev.t.handle, err)}
			return
		}
		node = n
	}
	if !s.conn.acquire() {
		refuse(s.level, ErrNoSession, "the active session is closing")
		return
	}
	ev.reply <- writeGrant{c: s.conn, node: node}
}
