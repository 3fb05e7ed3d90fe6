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
	dd        *dedupe
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
	s.dd = nil
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
	if overlap && len(s.live)+len(s.draining) > 0 && s.dd == nil {
		s.dd = newDedupe()
	}
	s.live[m.gen] = ns
	return nil
}

// detach removes the subscription from member gen at once (a promotion
// that failed).
func (s *Subscription) detach(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns := s.live[gen]; ns != nil {
		ns.Unsubscribe()
		delete(s.live, gen)
	}
	s.maybeEndDedupeLocked()
}

// drainGen starts draining the subscription on member gen.
func (s *Subscription) drainGen(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns := s.live[gen]; ns != nil {
		delete(s.live, gen)
		ns.Drain()
		s.draining[gen] = ns
	}
}

// drained reports whether the drain on member gen has finished.
func (s *Subscription) drained(gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.draining[gen]
	return ns == nil || !ns.IsValid()
}

// endOverlap forgets member gen and stops suppressing copies once only
// one member delivers.
func (s *Subscription) endOverlap(gen uint64) {
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
	s.maybeEndDedupeLocked()
}

func (s *Subscription) maybeEndDedupeLocked() {
	if len(s.live) <= 1 && len(s.draining) == 0 {
		s.dd = nil
	}
}

func (s *Subscription) handler(gen uint64) nats.MsgHandler {
	return func(m *nats.Msg) {
		s.dmu.Lock()
		defer s.dmu.Unlock()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		if s.dd != nil && !s.dd.admit(gen, m) {
			s.mu.Unlock()
			s.suppressed.Add(1)
			s.c.stats.suppressed.Add(1)
			return
		}
		s.mu.Unlock()
		s.delivered.Add(1)
		s.deliver(m)
	}
}

// dedupe delivers a message that arrives on several members as many times
// as it arrived on the member that carried it most often: a payload that
// was really published twice is delivered twice, a copy is not.
type dedupe struct {
	seed   maphash.Seed
	counts map[uint64]*dupCount
}

type dupCount struct {
	gen [3]uint64
	n   [3]uint32
}

func newDedupe() *dedupe {
	return &dedupe{seed: maphash.MakeSeed(), counts: make(map[uint64]*dupCount)}
}

func (d *dedupe) fingerprint(m *nats.Msg) uint64 {
	var h maphash.Hash
	h.SetSeed(d.seed)
	h.WriteString(m.Subject)
	h.WriteByte(0)
	h.WriteString(m.Reply)
	h.WriteByte(0)
	h.Write(m.Data)
	sum := h.Sum64()
	// Headers in any order hash the same.
	for k, vs := range m.Header {
		var hh maphash.Hash
		hh.SetSeed(d.seed)
		hh.WriteString(k)
		for _, v := range vs {
			hh.WriteByte(0)
			hh.WriteString(v)
		}
		sum ^= hh.Sum64()
	}
	return sum
}

func (d *dedupe) admit(gen uint64, m *nats.Msg) bool {
	fp := d.fingerprint(m)
	dc := d.counts[fp]
	if dc == nil {
		dc = &dupCount{}
		d.counts[fp] = dc
	}
	slot := -1
	for i := range dc.gen {
		if dc.gen[i] == gen || dc.gen[i] == 0 {
			dc.gen[i] = gen
			slot = i
			break
		}
	}
	if slot < 0 {
		return true
	}
	dc.n[slot]++
	for i := range dc.n {
		if i != slot && dc.n[i] >= dc.n[slot] {
			return false
		}
	}
	return true
}
