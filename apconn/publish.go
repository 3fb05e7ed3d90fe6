package apconn

import (
	"sync"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
)

// publisher is the publish path. Every publish goes through mu, which keeps
// the order in which publishers called in, and is recorded in the ledger
// until the broker it went to confirms it. While target is nil (a switch is
// cutting over, or the active is down with no passive) publishes are held
// in the ledger and sent, in order, when a target is set again.
type publisher struct {
	mu      sync.Mutex
	target  *member // nil while held
	ledger  ledger
	nextSeq uint64
	// seenSeq and seenAt are what observe last saw change: nextSeq, and
	// when. A publish reads no clock (a clock read was 2.5-5 % of the
	// relay's CPU flat out): the time of the last one is bounded from
	// above, by the first observation that found nextSeq where it is (see
	// hold).
	seenSeq uint64
	seenAt  time.Time
	closed  bool
	// released is closed and replaced each time a held path gets a target,
	// so Flush can wait for it.
	released chan struct{}
}

// Publish publishes data on subj through the active broker. It returns once
// the message is handed to the connection (as nats.go does) or held for a
// switch in progress; the message is kept and sent again after a switch
// until the broker has confirmed it.
func (c *Conn) Publish(subj string, data []byte) error {
	return c.publish(subj, "", nil, data)
}

// PublishMsg publishes m, with its headers and reply subject, as Publish.
func (c *Conn) PublishMsg(m *nats.Msg) error {
	if m == nil {
		return nats.ErrInvalidMsg
	}
	return c.publish(m.Subject, m.Reply, m.Header, m.Data)
}

// PublishOwned publishes m as PublishMsg does, without copying its Data:
// the Conn keeps m.Data, and the strings of m's subject and headers, for
// replay until the broker confirms it, so the caller must not change
// m.Data after the call. m itself and its Header map are the caller's
// again when PublishOwned returns (the Conn keeps neither), to reuse for
// the next message. It saves a copy per message on hot paths that build a
// new payload for every publish.
func (c *Conn) PublishOwned(m *nats.Msg) error {
	if m == nil {
		return nats.ErrInvalidMsg
	}
	if m.Subject == "" {
		return nats.ErrBadSubject
	}
	var buf [2 * 16]string
	kv := headerStrings(buf[:0], m.Header)
	return c.publishMsg(m, kv, msgSize(m, kv))
}

// PublishRequest publishes data on subj with reply as the reply subject.
func (c *Conn) PublishRequest(subj, reply string, data []byte) error {
	return c.publish(subj, reply, nil, data)
}

// publish publishes a copy of data: the caller may reuse its buffers once
// publish returns.
func (c *Conn) publish(subj, reply string, hdr nats.Header, data []byte) error {
	if subj == "" {
		return nats.ErrBadSubject
	}
	m := &nats.Msg{Subject: subj, Reply: reply, Header: hdr}
	if len(data) > 0 {
		m.Data = append([]byte(nil), data...)
	}
	kv := headerStrings(nil, hdr)
	size := msgSize(m, kv)
	// The header text is the caller's own, not a part of the payload.
	for _, s := range kv {
		size += len(s)
	}
	return c.publishMsg(m, kv, size)
}

// headerStrings appends h's keys and values to kv, key and value in turn,
// once per value: what nats.go sends of h, and what the ledger keeps.
func headerStrings(kv []string, h nats.Header) []string {
	for k, vs := range h {
		for _, v := range vs {
			kv = append(kv, k, v)
		}
	}
	return kv
}

// msgSize is what the replay buffer counts for m, kept with the header
// strings kv: its entry, its Data's capacity, its subject and reply, and
// a string header per header string. The strings' text is not counted:
// the relay's header values are the payload's own text (see
// wire.EncodeMsg) and its keys constants. Counted so, without more than
// the walk over the headers the ledger makes anyway, the replay buffer's
// bound is the heap its records hold.
func msgSize(m *nats.Msg, kv []string) int {
	return entrySize + cap(m.Data) + len(m.Subject) + len(m.Reply) + len(kv)*stringSize
}

const (
	entrySize  = int(unsafe.Sizeof(entry{}))
	stringSize = int(unsafe.Sizeof(""))
)

// publishMsg sends m on the target, if there is one, and keeps it in the
// ledger, as m.Data and the header strings kv, counted as size.
func (c *Conn) publishMsg(m *nats.Msg, kv []string, size int) error {
	p := &c.pub
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nats.ErrConnectionClosed
	}
	if !p.ledger.makeRoom(size) {
		c.stats.publishRejected.Add(1)
		return ErrPublishBufferFull
	}
	p.nextSeq++
	e := entry{seq: p.nextSeq, subj: m.Subject, reply: m.Reply, data: m.Data, size: size}
	if t := p.target; t != nil {
		if err := t.nc.PublishMsg(m); err != nil {
			// The target broke under us (closed, or nats.go's own
			// reconnect buffer is off). Keep the message held; the
			// disconnect handler is on its way and the switch will
			// send it.
			p.target = nil
			c.requestReconcile()
		} else {
			e.gen = t.gen
		}
	}
	p.ledger.push(e, kv)
	c.stats.published.Add(1)
	return nil
}

// hold stops sending and returns the target that was in use, the last
// sequence number handed to it and a time no earlier than when that
// happened: when observe first saw the last publish, or now if it has
// not yet. The time is late by at most an observation interval, which
// only lengthens a skew wait that is bounded anyway (skewCutover waits
// until lastPub plus the skew, never more than the skew from now).
func (p *publisher) hold() (prev *member, lastSeq uint64, lastPub time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev = p.target
	p.target = nil
	lastPub = p.seenAt
	if p.nextSeq != p.seenSeq {
		lastPub = time.Now()
	}
	return prev, p.nextSeq, lastPub
}

// observe records now as the time of the last publish if there has been
// one since the last observation. The Conn calls it at every confirm
// tick, so that hold can bound the time of the last publish without a
// clock read per publish; and the ledger ages its free chunks.
func (p *publisher) observe(now time.Time) {
	p.mu.Lock()
	if p.nextSeq != p.seenSeq {
		p.seenSeq, p.seenAt = p.nextSeq, now
	}
	p.ledger.age()
	p.mu.Unlock()
}

// release sends every held entry on m, in order, then makes m the target.
// With resend it also sends again every entry that was handed to a member
// but not confirmed, m itself included: m may be an active that nats.go
// reconnected onto a new socket, and what went into the old one is lost.
// It returns how many entries were sent again and whether it could send
// them all; on a failure the path stays held.
func (p *publisher) release(m *member, resend bool) (replayed int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, false
	}
	l := &p.ledger
	var msg nats.Msg
	for c, e := range l.all() {
		if e.gen != 0 && !resend {
			continue
		}
		if e.gen != 0 && e.seq <= l.confirmed[e.gen] {
			continue
		}
		c.msg(e, &msg)
		if err := m.nc.PublishMsg(&msg); err != nil {
			return replayed, false
		}
		if e.gen != 0 {
			replayed++
		}
		e.gen = m.gen
	}
	p.target = m
	// What was held went out now: the last publish handed to a target.
	p.seenSeq, p.seenAt = p.nextSeq, time.Now()
	close(p.released)
	p.released = make(chan struct{})
	return replayed, true
}

// mark returns the sequence number of the last publish handed to any
// member. A PING written after mark is read covers every publish up to it.
func (p *publisher) mark() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nextSeq
}

// resendOrphans sends again, on the current target, the entries that member
// gen had not confirmed when it was lost. They can arrive after newer
// publishes: this happens only when a broker dies within a round trip of a
// switch away from it.
func (p *publisher) resendOrphans(gen uint64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := &p.ledger
	n := 0
	var msg nats.Msg
	for c, e := range l.all() {
		if e.gen != gen {
			continue
		}
		if p.target == nil {
			e.gen = 0 // held: release sends it
			continue
		}
		c.msg(e, &msg)
		if p.target.nc.PublishMsg(&msg) == nil {
			e.gen = p.target.gen
			n++
		} else {
			e.gen = 0
		}
	}
	l.forget(gen)
	return n
}

func (p *publisher) confirm(gen, seq uint64) {
	p.mu.Lock()
	p.ledger.confirm(gen, seq)
	p.mu.Unlock()
}

// pending returns the number of publishes not yet confirmed or still held.
func (p *publisher) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ledger.len()
}
