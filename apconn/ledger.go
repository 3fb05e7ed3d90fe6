package apconn

import (
	"iter"

	"github.com/nats-io/nats.go"
)

// entry is one publish kept for replay: a compact record of the message,
// not the *nats.Msg. The message and its header map are the publisher's
// again once nats.go has written them to its buffer (PublishMsg copies
// synchronously), so a hot path can reuse them for its next publish; the
// ledger keeps only what it needs to build the message again for a
// replay: the subject, the payload and the header strings (in its
// chunk's hdrs), which for the relay's update messages are the payload's
// own text or constants (see wire.EncodeMsg).
type entry struct {
	seq   uint64
	gen   uint64 // member it was sent on; 0 if held (not sent yet)
	subj  string
	reply string
	data  []byte
	hdr   int32 // index of its first header string in its chunk's hdrs
	nhdr  int32 // header strings: key and value in turn, two per value
	size  int
}

// A chunk holds up to chunkEntries consecutive entries and their header
// strings, up to chunkHdrs of them (more for an entry that has more
// alone). The ledger is a FIFO of chunks: a chunk goes when its last
// entry is dropped, so what the ledger holds beyond its entries is at
// most a chunk at each end (and the free chunks, see ledger.free), where one slice for all
// entries, compacted once its dropped prefix was half of it, held up to
// twice its entries.
const (
	chunkEntries = 256
	chunkHdrs    = 16 * chunkEntries
)

type chunk struct {
	entries []entry
	hdrs    []string
	head    int // entries dropped at the front
}

// msg fills m with e, an entry of c, to send it again. m and its header
// map are reused from one entry to the next: nats.go's PublishMsg has
// copied what it sends when it returns. A header's single value is a
// slice of hdrs capped at its length, so that nothing appends into hdrs.
func (c *chunk) msg(e *entry, m *nats.Msg) {
	m.Subject, m.Reply, m.Data = e.subj, e.reply, e.data
	if e.nhdr == 0 {
		m.Header = nil
		return
	}
	if m.Header == nil {
		m.Header = make(nats.Header, e.nhdr/2)
	}
	clear(m.Header)
	for i := e.hdr; i < e.hdr+e.nhdr; i += 2 {
		k := c.hdrs[i]
		if vs, ok := m.Header[k]; ok {
			m.Header[k] = append(vs, c.hdrs[i+1])
		} else {
			m.Header[k] = c.hdrs[i+1 : i+2 : i+2]
		}
	}
}

// ledger is a FIFO of publishes not yet confirmed by the broker they were
// sent to, plus publishes held while there is no target.
type ledger struct {
	chunks []*chunk
	n      int // entries kept
	// free holds emptied chunks for the next entries: a busy ledger
	// drains at every confirmation and fills again until the next, and
	// would otherwise allocate a chunk every 256 publishes. It keeps no
	// more than the chunks the ledger had lately (hw) in all, and hw
	// decays at every confirm tick (age), so that a ledger gone quiet
	// gives its memory back within a few seconds.
	free      []*chunk
	hw        int
	bytes     int
	max       int
	confirmed map[uint64]uint64 // member gen -> highest seq it confirmed
	overflow  uint64            // sent entries dropped for space: not replayable
}

func (l *ledger) len() int { return l.n }

// push appends e with the header strings kv (key and value in turn).
func (l *ledger) push(e entry, kv []string) {
	var c *chunk
	if k := len(l.chunks); k > 0 {
		c = l.chunks[k-1]
	}
	if c == nil || len(c.entries) == cap(c.entries) || cap(c.hdrs) > 0 && len(c.hdrs)+len(kv) > cap(c.hdrs) {
		c = l.newChunk(len(kv))
		l.chunks = append(l.chunks, c)
		l.hw = max(l.hw, len(l.chunks))
	}
	if len(kv) > 0 && cap(c.hdrs) == 0 {
		// Only a chunk whose messages have headers holds strings for them.
		c.hdrs = make([]string, 0, max(chunkHdrs, len(kv)))
	}
	e.hdr, e.nhdr = int32(len(c.hdrs)), int32(len(kv))
	c.hdrs = append(c.hdrs, kv...)
	c.entries = append(c.entries, e)
	l.n++
	l.bytes += e.size
}

// newChunk returns a free chunk, or a new one, for an entry with nhdr
// header strings.
func (l *ledger) newChunk(nhdr int) *chunk {
	if k := len(l.free); k > 0 && nhdr <= chunkHdrs {
		c := l.free[k-1]
		l.free[k-1] = nil
		l.free = l.free[:k-1]
		return c
	}
	return &chunk{entries: make([]entry, 0, chunkEntries)}
}

// all yields the entries in order, each with its chunk.
func (l *ledger) all() iter.Seq2[*chunk, *entry] {
	return func(yield func(*chunk, *entry) bool) {
		for _, c := range l.chunks {
			for i := c.head; i < len(c.entries); i++ {
				if !yield(c, &c.entries[i]) {
					return
				}
			}
		}
	}
}

// front returns the oldest entry; the ledger is not empty.
func (l *ledger) front() *entry {
	c := l.chunks[0]
	return &c.entries[c.head]
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
	for l.n > 0 {
		e := l.front()
		if e.gen == 0 || e.seq > l.confirmed[e.gen] {
			break
		}
		l.drop()
	}
}

// drop drops the oldest entry, and its header strings: they may hold its
// payload (the relay's header values are slices of it). A chunk emptied
// goes to free, or to the collector.
func (l *ledger) drop() {
	c := l.chunks[0]
	e := &c.entries[c.head]
	l.bytes -= e.size
	clear(c.hdrs[e.hdr : e.hdr+e.nhdr])
	*e = entry{}
	c.head++
	l.n--
	if c.head < len(c.entries) {
		return
	}
	copy(l.chunks, l.chunks[1:])
	l.chunks[len(l.chunks)-1] = nil
	l.chunks = l.chunks[:len(l.chunks)-1]
	if cap(c.hdrs) <= chunkHdrs && len(l.free)+len(l.chunks) < l.hw {
		c.entries, c.hdrs, c.head = c.entries[:0], c.hdrs[:0], 0
		l.free = append(l.free, c)
	}
}

// age lets the high-water mark of chunks decay by a 64th (at least one)
// and gives the free chunks beyond it to the collector. The Conn calls it
// at every confirm tick: a busy ledger refills what it drained within a
// tick, and keeps all but a 64th of its free chunks from one to the next.
func (l *ledger) age() {
	l.hw = max(len(l.chunks), l.hw-(l.hw+63)/64)
	for len(l.free) > 0 && len(l.chunks)+len(l.free) > l.hw {
		k := len(l.free)
		l.free[k-1] = nil
		l.free = l.free[:k-1]
	}
}

// makeRoom drops already-sent entries from the head until size more bytes
// fit. It reports false when held entries fill the buffer.
func (l *ledger) makeRoom(size int) bool {
	for l.bytes+size > l.max && l.n > 0 {
		if l.front().gen == 0 {
			return false
		}
		l.drop()
		l.overflow++
	}
	return l.bytes+size <= l.max || l.n == 0
}

// forget drops member gen's confirmation record; the entries stay. Call it
// once no entry carries gen any more (resendOrphans has moved them all to
// another member or back to held), so that nothing consults the record
// again and the map does not grow with every member the Conn ever had.
func (l *ledger) forget(gen uint64) {
	delete(l.confirmed, gen)
}
