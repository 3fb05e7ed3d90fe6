package apconn

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Subscription is a subscription of a Conn. It survives switches: at a
// switch it is established on the new active before it is drained from the
// old one, and a message that arrives on both meanwhile is delivered once.
//
// The handler is never called concurrently with itself. The *nats.Msg it
// receives belongs to the nats.Conn that delivered it; m.Respond works, but
// use the Subscription, not m.Sub, to unsubscribe.
type Subscription struct {
	c       *Conn
	id      uint64
	subject string
	queue   string
	deliver func(*nats.Msg)

	dmu sync.Mutex // serializes deliveries from the underlying subscriptions

	mu        sync.Mutex
	live      map[uint64]*nats.Subscription // member gen -> subscription
	draining  map[uint64]*nats.Subscription
	arrived   map[uint64]uint64 // member gen -> messages its subscription handed us
	ov        *overlap          // set while a switch moves the subscription
	ended     *overlap          // the last overlap, to judge stragglers of its old path
	carry     map[uint64]int    // copies still due from an overlap cut short
	seed      maphash.Seed      // fingerprints of copies, stable across overlaps
	closed    bool
	stopping  bool // Drain called: deliver what is pending, attach nowhere new
	limitMsgs int
	limitByte int

	delivered  atomic.Uint64
	suppressed atomic.Uint64
	dropped    atomic.Uint64
}

// Subscribe expresses interest in subj; cb is called for each message.
func (c *Conn) Subscribe(subj string, cb nats.MsgHandler) (*Subscription, error) {
	if cb == nil {
		return nil, nats.ErrBadSubscription
	}
	return c.subscribe(subj, "", cb)
}

// QueueSubscribe is Subscribe in queue group queue.
func (c *Conn) QueueSubscribe(subj, queue string, cb nats.MsgHandler) (*Subscription, error) {
	if cb == nil || queue == "" {
		return nil, nats.ErrBadSubscription
	}
	return c.subscribe(subj, queue, cb)
}

// ChanSubscribe delivers the messages on subj to ch. As with nats.go, a
// message that finds ch full is dropped and counted as a slow consumer.
func (c *Conn) ChanSubscribe(subj string, ch chan *nats.Msg) (*Subscription, error) {
	return c.ChanQueueSubscribe(subj, "", ch)
}

// ChanQueueSubscribe is ChanSubscribe in queue group queue ("" for none).
func (c *Conn) ChanQueueSubscribe(subj, queue string, ch chan *nats.Msg) (*Subscription, error) {
	if ch == nil {
		return nil, nats.ErrBadSubscription
	}
	var s *Subscription
	cb := func(m *nats.Msg) {
		select {
		case ch <- m:
		default:
			s.dropped.Add(1)
			c.stats.slowConsumer.Add(1)
		}
	}
	var err error
	s, err = c.subscribe(subj, queue, cb)
	return s, err
}

func (c *Conn) subscribe(subj, queue string, cb nats.MsgHandler) (*Subscription, error) {
	if subj == "" {
		return nil, nats.ErrBadSubject
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	c.nextSub++
	s := &Subscription{
		c:        c,
		id:       c.nextSub,
		subject:  subj,
		queue:    queue,
		deliver:  cb,
		live:     make(map[uint64]*nats.Subscription),
		draining: make(map[uint64]*nats.Subscription),
		arrived:  make(map[uint64]uint64),
		seed:     maphash.MakeSeed(),
	}
	if c.active != nil {
		if err := s.attach(c.active, false); err != nil {
			return nil, err
		}
	}
	c.subs[s.id] = s
	return s, nil
}

func (c *Conn) subsLocked() []*Subscription {
	out := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		out = append(out, s)
	}
	return out
}

// Subject returns the subject of the subscription.
func (s *Subscription) Subject() string { return s.subject }

// Queue returns the queue group, or "".
func (s *Subscription) Queue() string { return s.queue }

// Delivered returns how many messages the handler received.
func (s *Subscription) Delivered() uint64 { return s.delivered.Load() }

// Suppressed returns how many copies of a message that arrived on both the
// old and the new active during a switch were dropped.
func (s *Subscription) Suppressed() uint64 { return s.suppressed.Load() }

// Dropped returns how many messages a channel subscription dropped because
// the channel was full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// IsValid reports whether the subscription is still active.
func (s *Subscription) IsValid() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed
}

// SetPendingLimits sets nats.go's pending limits on every underlying
// subscription, now and after each switch.
func (s *Subscription) SetPendingLimits(msgs, bytes int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limitMsgs, s.limitByte = msgs, bytes
	for _, ns := range s.live {
		if err := ns.SetPendingLimits(msgs, bytes); err != nil {
			return err
		}
	}
	return nil
}

// Unsubscribe removes the interest at once; messages not yet delivered are
// dropped, as with nats.go.
func (s *Subscription) Unsubscribe() error {
	s.c.forgetSub(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nats.ErrBadSubscription
	}
	s.closed = true
	s.ov, s.ended = nil, nil
	for _, ns := range s.live {
		ns.Unsubscribe()
	}
	for _, ns := range s.draining {
		ns.Unsubscribe()
	}
	clear(s.live)
	clear(s.draining)
	return nil
}

// Drain removes the interest but delivers the messages already on their
// way. It returns at once; Conn.Drain waits for the drains to finish.
func (s *Subscription) Drain(ctx context.Context) error {
	s.c.forgetSub(s)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nats.ErrBadSubscription
	}
	s.stopping = true
	for gen, ns := range s.live {
		ns.Drain()
		s.draining[gen] = ns
	}
	clear(s.live)
	s.mu.Unlock()
	for {
		s.mu.Lock()
		done := true
		for gen, ns := range s.draining {
			if ns.IsValid() {
				done = false
			} else {
				delete(s.draining, gen)
			}
		}
		if done {
			s.closed = true
		}
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			s.Unsubscribe()
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (c *Conn) forgetSub(s *Subscription) {
	c.mu.Lock()
	delete(c.subs, s.id)
	c.mu.Unlock()
}

// attach establishes the subscription on m. With overlap, copies arriving
// on both m and an older member are delivered once until endOverlap.
func (s *Subscription) attach(m *member, overlap bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.stopping {
		return nil
	}
	if _, ok := s.live[m.gen]; ok {
		return nil
	}
	var ns *nats.Subscription
	var err error
	if s.queue != "" {
		ns, err = m.nc.QueueSubscribe(s.subject, s.queue, s.handler(m.gen))
	} else {
		ns, err = m.nc.Subscribe(s.subject, s.handler(m.gen))
	}
	if err != nil {
		return err
	}
	if s.limitMsgs != 0 || s.limitByte != 0 {
		ns.SetPendingLimits(s.limitMsgs, s.limitByte)
	}
	if overlap && len(s.live) == 1 {
		for old := range s.live {
			s.ov = newOverlap(s.seed, old, m.gen, s.carry)
		}
		s.ended = nil
	}
	s.carry = nil
	s.live[m.gen] = ns
	return nil
}

// cutShort ends an overlap still in progress when another switch starts:
// the oldest path is dropped (by now the newer one has long had the
// interest) and what the newer path held is delivered.
func (s *Subscription) cutShort() {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	s.mu.Lock()
	ov := s.ov
	if ov == nil {
		s.mu.Unlock()
		return
	}
	for _, set := range []map[uint64]*nats.Subscription{s.live, s.draining} {
		if ns := set[ov.oldGen]; ns != nil {
			ns.Unsubscribe()
			delete(set, ov.oldGen)
		}
	}
	held := ov.release()
	s.carry = ov.residual()
	s.ov = nil
	n := ov.suppressed
	s.mu.Unlock()
	s.countSuppressed(n)
	s.deliverAll(held)
}

// detach removes the subscription from member gen at once (a promotion
// that failed).
func (s *Subscription) detach(gen uint64) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	s.mu.Lock()
	if ns := s.live[gen]; ns != nil {
		ns.Unsubscribe()
		delete(s.live, gen)
	}
	if s.ov != nil && s.ov.newGen == gen {
		s.ov = nil // the old path never stopped: nothing was missed
	}
	s.mu.Unlock()
}

// drainGen sends the UNSUB for member gen; what the broker sent before it
// is still delivered. finishOld completes the drain.
func (s *Subscription) drainGen(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns := s.live[gen]; ns != nil {
		delete(s.live, gen)
		ns.Drain()
		s.draining[gen] = ns
	}
}

// oldDone reports whether every message member gen's subscription queued
// has been through the handler. Call it after a PING on that member was
// answered following drainGen: from then on nothing more is queued.
func (s *Subscription) oldDone(gen uint64) bool {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.draining[gen]
	if ns == nil {
		return true
	}
	pending, _, err := ns.Pending()
	if err != nil {
		return true // nats.go has already removed it: drained
	}
	delivered, err := ns.Delivered()
	if err != nil {
		return true
	}
	return pending == 0 && uint64(delivered) == s.arrived[gen]
}

// finishOld ends the old path's priority: the messages that arrived only on
// the new path meanwhile are delivered now, in their order, and from now on
// the new path delivers directly.
func (s *Subscription) finishOld(gen uint64) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	s.mu.Lock()
	ov := s.ov
	if ov == nil || ov.oldGen != gen {
		s.mu.Unlock()
		return
	}
	held := ov.release()
	n := ov.suppressed
	ov.suppressed = 0
	s.mu.Unlock()
	s.countSuppressed(n)
	s.deliverAll(held)
}

// endOverlap forgets member gen; once only one member delivers, copies are
// no longer looked for.
func (s *Subscription) endOverlap(gen uint64) {
	s.finishOld(gen)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns := s.draining[gen]; ns != nil {
		ns.Unsubscribe()
		delete(s.draining, gen)
	}
	if ns := s.live[gen]; ns != nil {
		ns.Unsubscribe()
		delete(s.live, gen)
	}
	delete(s.arrived, gen)
	if s.ov != nil && (s.ov.oldGen == gen || s.ov.newGen == gen) {
		s.countSuppressed(s.ov.suppressed)
		s.ov.suppressed = 0
		// A message nats.go had already handed to the old path's delivery
		// goroutine can still reach the handler; it is judged against the
		// counts of this overlap until the next switch.
		s.ended, s.ov = s.ov, nil
	}
}

func (s *Subscription) countSuppressed(n uint64) {
	if n > 0 {
		s.suppressed.Add(n)
		s.c.stats.suppressed.Add(n)
	}
}

// deliverAll hands msgs to the user; dmu must be held, mu must not.
func (s *Subscription) deliverAll(msgs []*nats.Msg) {
	for _, m := range msgs {
		s.delivered.Add(1)
		s.deliver(m)
	}
}

func (s *Subscription) handler(gen uint64) nats.MsgHandler {
	return func(m *nats.Msg) {
		s.dmu.Lock()
		defer s.dmu.Unlock()
		s.mu.Lock()
		s.arrived[gen]++
		if s.closed {
			s.mu.Unlock()
			return
		}
		ov := s.ov
		if ov == nil && s.ended != nil && gen == s.ended.oldGen {
			ov = s.ended
		}
		ok := ov == nil || ov.admit(gen, m)
		var n uint64
		if ov != nil {
			n, ov.suppressed = ov.suppressed, 0
		}
		s.mu.Unlock()
		s.countSuppressed(n)
		if ok {
			s.delivered.Add(1)
			s.deliver(m)
		}
	}
}

// overlap merges the two deliveries of a subscription while a switch moves
// it from member oldGen to member newGen, so that the user sees each
// message once and in the order of one path:
//
//   - first the old path has priority: it delivers at once, and whatever
//     arrives on the new path is held;
//   - when the old path is drained (release), the held messages are
//     delivered in their order, except copies of what the old path
//     delivered;
//   - then either path delivers at once, copies still dropped, until the
//     overlap ends.
//
// Copies are matched by subject, reply, headers and payload and counted: a
// message is delivered when its path has carried it more often than the
// other path has, so a payload really published twice is delivered twice.
type overlap struct {
	oldGen, newGen uint64
	phase          int
	seed           maphash.Seed
	nOld, nNew     map[uint64]int
	held           []*nats.Msg
	suppressed     uint64
	// Copies due on each path from an earlier overlap that a new switch
	// cut short: the oldest path delivered them, these paths may still.
	dueOld, dueNew map[uint64]int
}

const (
	phaseOldFirst = iota + 1
	phaseMerged
)

func newOverlap(seed maphash.Seed, oldGen, newGen uint64, carry map[uint64]int) *overlap {
	o := &overlap{
		oldGen: oldGen, newGen: newGen, phase: phaseOldFirst, seed: seed,
		nOld: map[uint64]int{}, nNew: map[uint64]int{},
		dueOld: map[uint64]int{}, dueNew: map[uint64]int{},
	}
	for fp, n := range carry {
		o.dueOld[fp], o.dueNew[fp] = n, n
	}
	return o
}

// residual returns, by fingerprint, the copies the old path delivered that
// the new path has not carried yet.
func (o *overlap) residual() map[uint64]int {
	out := map[uint64]int{}
	for fp, n := range o.nOld {
		if d := n - o.nNew[fp]; d > 0 {
			out[fp] = d
		}
	}
	for fp, n := range o.dueOld {
		if n > 0 {
			out[fp] += n
		}
	}
	return out
}

func (o *overlap) fingerprint(m *nats.Msg) uint64 {
	var h maphash.Hash
	h.SetSeed(o.seed)
	h.WriteString(m.Subject)
	h.WriteByte(0)
	h.WriteString(m.Reply)
	h.WriteByte(0)
	h.Write(m.Data)
	sum := h.Sum64()
	// Headers in any order hash the same.
	for k, vs := range m.Header {
		var hh maphash.Hash
		hh.SetSeed(o.seed)
		hh.WriteString(k)
		for _, v := range vs {
			hh.WriteByte(0)
			hh.WriteString(v)
		}
		sum ^= hh.Sum64()
	}
	return sum
}

// admit reports whether m, arriving from member gen, is delivered now.
func (o *overlap) admit(gen uint64, m *nats.Msg) bool {
	switch {
	case gen == o.newGen && o.phase == phaseOldFirst:
		o.held = append(o.held, m)
		return false
	case gen == o.oldGen:
		fp := o.fingerprint(m)
		if o.dueOld[fp] > 0 {
			o.dueOld[fp]--
			return o.keep(false)
		}
		o.nOld[fp]++
		return o.keep(o.nOld[fp] > o.nNew[fp])
	case gen == o.newGen:
		fp := o.fingerprint(m)
		if o.dueNew[fp] > 0 {
			o.dueNew[fp]--
			return o.keep(false)
		}
		o.nNew[fp]++
		return o.keep(o.nNew[fp] > o.nOld[fp])
	}
	return true
}

func (o *overlap) keep(ok bool) bool {
	if !ok {
		o.suppressed++
	}
	return ok
}

// release ends the old path's priority and returns the held messages that
// are not copies, in order.
func (o *overlap) release() []*nats.Msg {
	if o.phase != phaseOldFirst {
		return nil
	}
	o.phase = phaseMerged
	held := o.held
	o.held = nil
	out := held[:0]
	for _, m := range held {
		if o.admit(o.newGen, m) {
			out = append(out, m)
		}
	}
	return out
}
