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

// entry is one publish kept for replay.
type entry struct {
	seq  uint64
	gen  uint64 // member it was sent on; 0 if held (not sent yet)
	msg  *nats.Msg
	size int
}

// ledger is a FIFO of publishes not yet confirmed by the broker they were
// sent to, plus publishes held while there is no target.
type ledger struct {
	entries   []entry
	head      int
	bytes     int
	max       int
	confirmed map[uint64]uint64 // member gen -> highest seq it confirmed
	overflow  uint64            // sent entries dropped for space: not replayable
}

func (l *ledger) len() int { return len(l.entries) - l.head }

func (l *ledger) push(e entry) {
	l.entries = append(l.entries, e)
	l.bytes += e.size
}

// confirm records that member gen has processed everything it was sent up to
// seq, and drops the confirmed entries at the head.
func (l *ledger) confirm(gen, seq uint64) {
	if l.confirmed == nil {
		l.confirmed = make(map[uint64]uint64)
	}
	if seq > l.confirmed[gen] {
		l.confirmed[gen] = seq
	}
	l.trim()
}

func (l *ledger) trim() {
	for l.head < len(l.entries) {
		e := &l.entries[l.head]
		if e.gen == 0 || e.seq > l.confirmed[e.gen] {
			break
		}
		l.drop()
	}
	l.compact()
}

func (l *ledger) drop() {
	l.bytes -= l.entries[l.head].size
	l.entries[l.head] = entry{}
	l.head++
}

// compact reclaims the dropped prefix once it is most of the slice.
func (l *ledger) compact() {
	if l.head == len(l.entries) {
		l.entries = l.entries[:0]
		l.head = 0
		return
	}
	if l.head > 1024 && l.head > len(l.entries)/2 {
		n := copy(l.entries, l.entries[l.head:])
		clear(l.entries[n:])
		l.entries = l.entries[:n]
		l.head = 0
	}
}

// makeRoom drops already-sent entries from the head until size more bytes
// fit. It reports false when held entries fill the buffer.
func (l *ledger) makeRoom(size int) bool {
	for l.bytes+size > l.max && l.head < len(l.entries) {
		if l.entries[l.head].gen == 0 {
			return false
		}
		l.drop()
		l.overflow++
	}
	l.compact()
	return l.bytes+size <= l.max || l.len() == 0
}

// forget drops member gen's confirmation record; the entries stay. Call it
// once no entry carries gen any more (resendOrphans has moved them all to
// another member or back to held), so that nothing consults the record
// again and the map does not grow with every member the Conn ever had.
func (l *ledger) forget(gen uint64) {
	delete(l.confirmed, gen)
}

// copyMsg copies what Publish needs to send m again: the caller may reuse
// its buffers once Publish returns.
func copyMsg(subj, reply string, hdr nats.Header, data []byte) (*nats.Msg, int) {
	m := &nats.Msg{Subject: subj, Reply: reply}
	size := len(subj) + len(reply) + len(data)
	if len(data) > 0 {
		m.Data = append([]byte(nil), data...)
	}
	if len(hdr) > 0 {
		m.Header = make(nats.Header, len(hdr))
		for k, v := range hdr {
			m.Header[k] = append([]string(nil), v...)
			size += len(k)
			for _, s := range v {
				size += len(s)
			}
		}
	}
	return m, size + 64
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

// PublishOwned publishes m as PublishMsg does, without copying it: the
// Conn keeps m for replay until the broker confirms it, so the caller must
// not change m, its Data or its Header after the call. It saves a copy per
// message on hot paths that build a new message for every publish.
func (c *Conn) PublishOwned(m *nats.Msg) error {
	if m == nil {
		return nats.ErrInvalidMsg
	}
	if m.Subject == "" {
		return nats.ErrBadSubject
	}
	return c.publishMsg(m, msgSize(m))
}

// PublishRequest publishes data on subj with reply as the reply subject.
func (c *Conn) PublishRequest(subj, reply string, data []byte) error {
	return c.publish(subj, reply, nil, data)
}

func (c *Conn) publish(subj, reply string, hdr nats.Header, data []byte) error {
	if subj == "" {
		return nats.ErrBadSubject
	}
	m, size := copyMsg(subj, reply, hdr, data)
	return c.publishMsg(m, size)
}

// msgSize is what the replay buffer counts for m, kept by PublishOwned.
func msgSize(m *nats.Msg) int {
	size := msgStruct + cap(m.Data) + len(m.Subject) + len(m.Reply)
	if n := len(m.Header); n > 0 {
		size += headerMap + (n+7)/8*headerGroup + n*headerValue
	}
	return size
}

// What a message PublishOwned keeps holds on the heap besides its Data:
// the message itself, and for headers the map (its struct and a group of 8
// slots, each a string key and a []string value, per 8 headers) and each
// value (a string header and its text, which the relay's update messages
// share with their Data: see wire.EncodeMsg). Counted so, without a walk
// over the headers, the replay buffer's bound is the heap its messages
// hold, not half of it.
const (
	msgStruct   = int(unsafe.Sizeof(nats.Msg{}))
	headerMap   = 48
	headerGroup = 8 + 8*(16+24)
	headerValue = 32
)

func (c *Conn) publishMsg(m *nats.Msg, size int) error {
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
	e := entry{seq: p.nextSeq, msg: m, size: size}
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
	p.ledger.push(e)
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
// clock read per publish.
func (p *publisher) observe(now time.Time) {
	p.mu.Lock()
	if p.nextSeq != p.seenSeq {
		p.seenSeq, p.seenAt = p.nextSeq, now
	}
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
	for i := l.head; i < len(l.entries); i++ {
		e := &l.entries[i]
		if e.gen != 0 && !resend {
			continue
		}
		if e.gen != 0 && e.seq <= l.confirmed[e.gen] {
			continue
		}
		if err := m.nc.PublishMsg(e.msg); err != nil {
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
	for i := l.head; i < len(l.entries); i++ {
		e := &l.entries[i]
		if e.gen != gen {
			continue
		}
		if p.target == nil {
			e.gen = 0 // held: release sends it
			continue
		}
		if p.target.nc.PublishMsg(e.msg) == nil {
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
