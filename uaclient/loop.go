package uaclient

import (
	"context"
	"github.com/apbridge/apbridge/servicelevel"
	"time"

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
		published
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
	if !p.set.Single && p.sess[p.pol.Active().Other()] == nil {
		consider(p.standbyAt)
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
