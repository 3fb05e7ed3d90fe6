package apconn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
)

// step is one thing reconcile decided to do.
type step int

const (
	stepNone step = iota
	stepPromote
	stepResume
	stepRetirePassive
	stepArm
	stepForceReconnect
)

type plan struct {
	step      step
	m         *member
	why       Cause
	triggered time.Time
}

// reconcile brings the pair back to a healthy shape: an active that is up
// and not going away, and a ready passive on another broker. Every trigger
// (LDM notice, disconnect, reconnect, link timeout, arm retry) runs it, on
// the executor, never on a nats.go goroutine.
func (c *Conn) reconcile(ctx context.Context) {
	for range 16 {
		if ctx.Err() != nil {
			return
		}
		p := c.decide()
		switch p.step {
		case stepNone:
			return
		case stepPromote:
			c.promote(ctx, p.m, p.why, p.triggered)
		case stepResume:
			c.resume(p.m)
		case stepRetirePassive:
			c.retirePassive(p.m, p.why)
		case stepForceReconnect:
			p.m.nc.ForceReconnect()
		case stepArm:
			if !c.arm(ctx, p.why) {
				return
			}
		}
	}
	// Still not settled: look again shortly rather than spin.
	c.scheduleReconcile(c.opts.armBackoffMin)
}

func (c *Conn) decide() plan {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return plan{}
	}
	a, p := c.active, c.passive
	h := c.opts.handling
	if a == nil || a.down {
		if p.ready() {
			why, at := CauseActiveDown, time.Now()
			if a != nil {
				why, at = a.downWhy, a.downAt
			}
			return plan{step: stepPromote, m: p, why: why, triggered: at}
		}
		if a != nil && a.down && a.downWhy == CauseLinkTimeout && !a.forced {
			// nats.go still thinks the frozen link is up; with no passive
			// to take over, make it reconnect.
			a.forced = true
			return plan{step: stepForceReconnect, m: a}
		}
		if p != nil {
			return plan{step: stepRetirePassive, m: p, why: CausePassiveDown}
		}
		if time.Now().Before(c.armRetryAt) {
			return plan{}
		}
		return plan{step: stepArm, why: CauseActiveDown}
	}
	if c.pubHeld() {
		return plan{step: stepResume, m: a}
	}
	if a.ldm && h.ActsOnActive() && p.ready() {
		return plan{step: stepPromote, m: p, why: CauseLameDuck, triggered: a.ldmAt}
	}
	if p != nil {
		switch {
		case p.down:
			return plan{step: stepRetirePassive, m: p, why: CausePassiveDown}
		case p.ldm && h.ActsOnPassive():
			return plan{step: stepRetirePassive, m: p, why: CausePassiveLameDuck}
		case p.server().ID != "" && p.server().ID == a.server().ID:
			return plan{step: stepRetirePassive, m: p, why: CauseSameServer}
		}
		return plan{}
	}
	if time.Now().Before(c.armRetryAt) {
		return plan{}
	}
	why := c.pendingWhy
	if why == 0 {
		why = CausePassiveDown
	}
	return plan{step: stepArm, why: why}
}

func (c *Conn) pubHeld() bool {
	c.pub.mu.Lock()
	defer c.pub.mu.Unlock()
	return c.pub.target == nil && !c.pub.closed
}

// resume sends held publishes on an active that came back by itself
// (nats.go reconnected it, or a switch left the path held).
func (c *Conn) resume(a *member) {
	a.epoch.Store(a.nc.Stats().Reconnects)
	n, ok := c.pub.release(a, true)
	if !ok {
		return
	}
	c.stats.replayed.Add(uint64(n))
	c.log.Info().Str("server", a.server().Name).Int("replayed", n).Msg("active reconnected")
	c.disp.emit(Event{Kind: EventReconnected, Role: RoleActive, To: a.server(), At: time.Now(), Replayed: n})
}

// retirePassive closes the passive so that a fresh one is armed.
func (c *Conn) retirePassive(p *member, why Cause) {
	c.mu.Lock()
	if c.passive != p {
		c.mu.Unlock()
		return
	}
	c.passive = nil
	c.pendingWhy = why
	if c.passiveLost.IsZero() {
		c.passiveLost = time.Now()
	}
	c.mu.Unlock()
	c.closeMember(p)
	c.log.Info().Str("server", p.server().Name).Str("cause", why.String()).Msg("passive retired")
	c.disp.emit(Event{Kind: EventPassiveLost, Cause: why, Role: RolePassive, From: p.server(), At: time.Now()})
}

// candidates lists the servers a new passive may use, best first: the
// configured ones and those the cluster advertised, except the active's
// broker. Brokers known to be in LDM go last: their listener is closed, and
// a restarted one comes back with a new server ID.
func (c *Conn) candidatesLocked() []string {
	seen := map[string]bool{}
	var good, lame []string
	exclude := map[string]bool{}
	if c.active != nil && !c.active.down {
		exclude[hostPort(c.active.server().URL)] = true
	}
	lameHost := map[string]bool{}
	for _, m := range c.members {
		if m.ldm {
			lameHost[hostPort(m.server().URL)] = true
		}
	}
	add := func(u string) {
		hp := hostPort(u)
		if seen[hp] || exclude[hp] {
			return
		}
		seen[hp] = true
		if lameHost[hp] {
			lame = append(lame, u)
		} else {
			good = append(good, u)
		}
	}
	for _, s := range c.seeds {
		add(s)
	}
	for _, m := range c.members {
		for _, s := range m.nc.Servers() {
			add(s)
		}
	}
	rand.Shuffle(len(good), func(i, j int) { good[i], good[j] = good[j], good[i] })
	return append(good, lame...)
}

// arm connects a new passive on a broker other than the active's, proves
// it end to end and installs it. On failure it schedules a retry with
// backoff and reports false.
func (c *Conn) arm(ctx context.Context, why Cause) bool {
	c.mu.Lock()
	urls := c.candidatesLocked()
	a := c.active
	if a != nil && a.down {
		a = nil
	}
	c.mu.Unlock()

	m, err := c.armOn(ctx, urls, a)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		c.armFailed(err)
		return false
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		m.nc.Close()
		return false
	}
	m.role, m.proven = RolePassive, true
	c.members[m.gen] = m
	c.passive = m
	c.armFails = 0
	c.armRetryAt = time.Time{}
	wasDegraded := c.degraded
	c.degraded = false
	lost := c.passiveLost
	c.passiveLost = time.Time{}
	c.pendingWhy = 0
	c.updateSteerLocked()
	c.mu.Unlock()

	now := time.Now()
	e := Event{Kind: EventPassiveArmed, Cause: why, Role: RolePassive, To: m.server(), At: now}
	if !lost.IsZero() {
		e.Triggered, e.Duration = lost, now.Sub(lost)
	}
	c.stats.armed.Add(1)
	c.log.Info().Str("server", m.server().Name).Str("url", m.server().URL).Str("cause", why.String()).
		Bool("was_degraded", wasDegraded).Dur("rehome_ms", e.Duration).Msg("passive armed")
	c.disp.emit(e)
	return true
}

func (c *Conn) armOn(ctx context.Context, urls []string, a *member) (*member, error) {
	if len(urls) == 0 {
		return nil, errors.New("no broker other than the active's is known")
	}
	m, err := c.dial(urls)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	_, lame := c.lame[m.server().ID]
	c.mu.Unlock()
	switch {
	case a != nil && m.server().ID == a.server().ID:
		m.nc.Close()
		return nil, fmt.Errorf("reached the active's broker %s again through %s", a.server().Name, m.server().URL)
	case lame:
		m.nc.Close()
		return nil, fmt.Errorf("broker %s is in lame-duck mode", m.server().Name)
	}
	if a != nil {
		if err := c.prove(ctx, a, m); err != nil {
			m.nc.Close()
			return nil, err
		}
	}
	return m, nil
}

func (c *Conn) armFailed(err error) {
	c.stats.armFailures.Add(1)
	c.mu.Lock()
	c.armFails++
	d := c.opts.armBackoffMin << min(c.armFails-1, 16)
	if d > c.opts.armBackoffMax || d <= 0 {
		d = c.opts.armBackoffMax
	}
	d = d/2 + rand.N(d/2+1)
	c.armRetryAt = time.Now().Add(d)
	first := !c.degraded
	c.degraded = true
	c.mu.Unlock()
	c.scheduleReconcile(d)
	if first {
		c.log.Warn().Err(err).Msg("no passive: running degraded, will keep trying")
		c.disp.emit(Event{Kind: EventDegraded, At: time.Now(), Err: err})
	} else {
		c.log.Debug().Err(err).Dur("retry_in_ms", d).Msg("passive arm failed")
	}
}

func (c *Conn) scheduleReconcile(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.armTimer != nil {
		c.armTimer.Stop()
	}
	c.armTimer = time.AfterFunc(d, c.requestReconcile)
}

// promote makes p the active. Subscriptions are established on p before
// they leave the old active (make before break), and publishes cut over
// without loss: held publishes and those the old active had not confirmed,
// if it is gone, are sent on p first, in order.
func (c *Conn) promote(ctx context.Context, p *member, why Cause, triggered time.Time) {
	c.mu.Lock()
	if c.passive != p || c.closed {
		c.mu.Unlock()
		return
	}
	old := c.active
	oldAlive := old != nil && !old.down && !old.retired
	subs := c.subsLocked()
	c.mu.Unlock()

	var replayed int
	if oldAlive {
		// One overlap at a time: a subscription merges two paths, not
		// three. A switch right after another waits for the previous old
		// active to be drained (a fraction of a second).
		c.mu.Lock()
		prev := c.retiring
		c.mu.Unlock()
		if prev != nil {
			select {
			case <-prev:
			case <-ctx.Done():
				return
			}
		}
		// An ordered cutover holds publishes and waits until old's broker
		// has passed on what old sent it; started now, that shares the
		// subscriptions' round trip.
		var barrier chan struct{}
		if !c.opts.fastCutover {
			c.pub.hold()
			barrier = make(chan struct{})
			go func() {
				defer close(barrier)
				c.orderedCutover(ctx, old, p)
			}()
		}
		for _, s := range subs {
			s.cutShort()
			s.attach(p, true)
		}
		// p's broker registers the subscriptions before it forwards this
		// probe, and sends its new interest to old's broker over the route
		// that carries the probe: once old receives it, messages published
		// anywhere old's broker forwards reach p's subscriptions too.
		err := c.proveInterest(ctx, p, old)
		if err != nil && c.flushMember(ctx, p) != nil {
			if barrier != nil {
				<-barrier
			}
			c.promoteFailed(p, subs, err)
			c.pub.release(old, false)
			return
		}
		if barrier != nil {
			<-barrier
		} else {
			c.skewCutover(ctx, old, p)
		}
		c.pub.release(p, false)
	} else {
		for _, s := range subs {
			s.cutShort()
			s.attach(p, false)
		}
		if err := c.flushMember(ctx, p); err != nil {
			c.promoteFailed(p, subs, err)
			return
		}
		n, ok := c.pub.release(p, true)
		if !ok {
			c.promoteFailed(p, subs, errors.New("passive broke while replaying"))
			return
		}
		replayed = n
		c.stats.replayed.Add(uint64(n))
	}

	c.mu.Lock()
	// Subscriptions made while the switch ran were attached to old only.
	for _, s := range c.subs {
		s.attach(p, oldAlive)
	}
	c.active = p
	p.role = RoleActive
	c.passive = nil
	c.pendingWhy = why
	if c.passiveLost.IsZero() {
		c.passiveLost = time.Now()
	}
	if old != nil {
		old.role = 0
	}
	c.updateSteerLocked()
	c.mu.Unlock()

	now := time.Now()
	e := Event{Kind: EventSwitched, Cause: why, Role: RoleActive, To: p.server(), At: now,
		Triggered: triggered, Duration: now.Sub(triggered), Replayed: replayed}
	if old != nil {
		e.From = old.server()
	}
	c.stats.countSwitch(why)
	c.log.Info().Str("cause", why.String()).Str("from", e.From.Name).Str("to", p.server().Name).
		Str("to_url", p.server().URL).Dur("duration_ms", e.Duration).Int("replayed", replayed).
		Msg("switched to passive")
	c.disp.emit(e)

	if old != nil {
		c.retire(old, oldAlive)
	}
}

// proveInterest waits for a message from p to reach old.
func (c *Conn) proveInterest(ctx context.Context, p, old *member) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.proveTimeout)
	defer cancel()
	tok, ch := c.expectProbe()
	defer c.forgetProbe(tok)
	if err := p.nc.Publish(old.probeSubj, []byte(tok)); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// orderedCutover waits, with publishes held, until a publish sent through
// p can no longer overtake one sent through old at a subscriber on old's or
// p's broker.
//
// old's PONG proves that its broker processed every earlier publish, which
// orders them for subscribers on that broker, and confirms them in the
// ledger. It does not prove that the broker's route to p's broker carried
// them: the broker writes to each route from another goroutine, and on a
// loaded machine a route fell more than two thousand messages behind a
// client with a 10 ms round trip. So a probe published on old after the last publish
// is awaited on p: old's broker processes its client's messages in order,
// the route carries them in order, and p's broker queues what the route
// brings for its own subscribers before it passes the probe on to p.
// Subscribers on a third broker get old's messages over another route, and
// for them the order rests on timing (see docs/apconn.md).
func (c *Conn) orderedCutover(ctx context.Context, old, p *member) {
	tok, arrived := c.expectProbe()
	defer c.forgetProbe(tok)
	err := old.nc.Publish(p.probeSubj, []byte(tok))
	if err == nil {
		// Only for the ledger: the probe is what orders the cutover.
		if cerr := c.confirm(ctx, old); cerr != nil {
			c.log.Debug().Err(cerr).Str("server", old.server().Name).Msg("old active did not confirm at the cutover")
		}
		err = c.awaitRoute(ctx, old, p, arrived)
	}
	if err != nil && ctx.Err() == nil {
		c.stats.unordered.Add(1)
		c.log.Warn().Err(err).Str("from", old.server().Name).Str("to", p.server().Name).
			Msg("cutover went ahead without proof that the old broker passed everything on; subscribers may see old messages after new ones")
	}
}

// awaitRoute waits for the probe orderedCutover sent on old to reach p,
// until the prove timeout or until old's link is found down.
func (c *Conn) awaitRoute(ctx context.Context, old, p *member, arrived <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.proveTimeout)
	defer cancel()
	c.mu.Lock()
	lost := old.lost
	c.mu.Unlock()
	select {
	case <-arrived:
		return nil
	case <-lost:
		return fmt.Errorf("apconn: %s was lost during the cutover", old.server().Name)
	case <-ctx.Done():
		return fmt.Errorf("apconn: no probe from %s over its route to %s: %w", old.server().Name, p.server().Name, ctx.Err())
	}
}

// skewCutover holds publishes only for the difference between the two
// brokers' one-way latencies since the last publish handed to old, so that
// a steady publisher's next message cannot overtake its last one.
//
// The skew counts from when the last publish left for old's broker: nats.go
// buffers a publish until its flusher goroutine writes it, which a loaded
// machine can delay past the skew. fastSlack covers the brokers' own
// scheduling. Ending the hold at old's PONG instead reordered more under
// load (7 of 40 runs against 1): the broker writes the PONG to the client
// and the message to the route from different goroutines, so the PONG
// does not prove the message has left for the other brokers.
func (c *Conn) skewCutover(ctx context.Context, old, p *member) {
	_, _, lastPub := c.pub.hold()
	left := lastPub
	for giveUp := time.Now().Add(maxFlushWait); time.Now().Before(giveUp); {
		if n, err := old.nc.Buffered(); err != nil || n == 0 {
			break
		}
		if ctxtime.Sleep(ctx, 50*time.Microsecond) != nil {
			return
		}
		left = time.Now()
	}
	skew := (old.rtt.min()-p.rtt.min())/2 + fastSlack
	if wait := time.Until(left.Add(skew)); wait > 0 {
		ctxtime.Sleep(ctx, wait)
	}
}

const (
	// maxFlushWait bounds how long a fast cutover waits for old's write
	// buffer to drain: fast means a bounded hold.
	maxFlushWait = 10 * time.Millisecond
	// fastSlack is what a fast cutover allows the brokers beyond the
	// latency difference, for their own scheduling.
	fastSlack = 5 * time.Millisecond
)

func (c *Conn) promoteFailed(p *member, subs []*Subscription, err error) {
	for _, s := range subs {
		s.detach(p.gen)
	}
	c.mu.Lock()
	c.markDownLocked(p, time.Now(), CausePassiveDown)
	c.mu.Unlock()
	c.log.Warn().Err(err).Str("server", p.server().Name).Msg("passive failed during promotion")
}

// retire takes an old active out of service. A live one keeps delivering
// until the overlap has passed and its subscriptions are drained, and its
// unconfirmed publishes are confirmed or sent again; a dead one is closed at
// once.
func (c *Conn) retire(old *member, alive bool) {
	if !alive {
		c.pub.resendOrphans(old.gen)
		c.closeMember(old)
		return
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.retiring = done
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(done)
		ctx := c.ctx
		if err := c.confirm(ctx, old); err != nil {
			if n := c.pub.resendOrphans(old.gen); n > 0 {
				c.stats.replayed.Add(uint64(n))
			}
		}
		c.mu.Lock()
		lost := old.lost
		c.mu.Unlock()
		if !sleepUnless(ctx, lost, c.opts.overlap) {
			c.closeMember(old)
			return
		}
		c.mu.Lock()
		subs := c.subsLocked()
		c.mu.Unlock()
		for _, s := range subs {
			s.drainGen(old.gen)
		}
		// Once a PING sent after the UNSUBs is answered, the old broker
		// has sent everything it will send; wait for the handler to have
		// seen it, then let the new path deliver what it held.
		if c.flushMember(ctx, old) == nil {
			deadline := time.Now().Add(5 * time.Second)
			for _, s := range subs {
				for !s.oldDone(old.gen) && time.Now().Before(deadline) {
					if ctxtime.Sleep(ctx, time.Millisecond) != nil {
						break
					}
				}
			}
		}
		for _, s := range subs {
			s.finishOld(old.gen)
		}
		ctxtime.Sleep(ctx, c.opts.dedupeTail)
		for _, s := range subs {
			s.endOverlap(old.gen)
		}
		c.closeMember(old)
	}()
}

// sleepUnless sleeps for d, or until lost is closed (then it returns
// true at once: there is nothing left to wait for), or until ctx is done
// (false).
func sleepUnless(ctx context.Context, lost <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-lost:
		return true
	case <-ctx.Done():
		return false
	}
}

// SwitchToPassive promotes the passive now, as an LDM notice would. It
// returns ErrNoPassive if no passive is ready, and once the switch is done
// or ctx is.
func (c *Conn) SwitchToPassive(ctx context.Context) error {
	return c.manual(ctx, func(ectx context.Context) error {
		c.mu.Lock()
		p := c.passive
		ready := p.ready()
		c.mu.Unlock()
		if !ready {
			return ErrNoPassive
		}
		c.promote(ectx, p, CauseManual, time.Now())
		c.mu.Lock()
		switched := c.active == p
		c.mu.Unlock()
		if !switched {
			return fmt.Errorf("apconn: switch to %s failed", p.server().Name)
		}
		return nil
	})
}

// RehomePassive replaces the passive with a fresh one on another broker.
// It returns once the new passive is armed, or with the reason it could not
// be (the Conn keeps trying in the background).
func (c *Conn) RehomePassive(ctx context.Context) error {
	return c.manual(ctx, func(ectx context.Context) error {
		c.mu.Lock()
		p := c.passive
		c.armRetryAt = time.Time{}
		c.mu.Unlock()
		if p != nil {
			c.retirePassive(p, CauseManual)
		}
		if !c.arm(ectx, CauseManual) {
			return errors.New("apconn: no broker available for a new passive; retrying in the background")
		}
		return nil
	})
}

// manual runs op on the executor, like every switch, and waits for its
// result or ctx. A manual request is never coalesced with another; after
// it, reconcile repairs whatever the operation left (a missing passive).
func (c *Conn) manual(ctx context.Context, op func(context.Context) error) error {
	done := make(chan error, 1)
	if !c.exec.Submit(new(int), func(ectx context.Context) {
		done <- op(ectx)
		c.reconcile(ectx)
	}) {
		return ErrClosed
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
