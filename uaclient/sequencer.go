package uaclient

import (
	"math"
	"time"
)

// Sequence numbers of a subscription's NotificationMessages, as OPC UA
// Part 4 defines them: a new subscription numbers its first data message
// 1, each further data message takes the next number, and after
// 4294967295 the numbers wrap to 1 (0 is never used). A keep-alive message
// carries the number the next data message will have and uses none up; it
// is not acknowledged.

// seqNext returns the sequence number that follows n.
func seqNext(n uint32) uint32 {
	if n == math.MaxUint32 {
		return 1
	}
	return n + 1
}

// seqDiff returns how many steps lead from b to a on the ring of sequence
// numbers 1..4294967295: positive when a comes after b, negative when it
// comes before, within half the ring either way.
func seqDiff(a, b uint32) int64 {
	const ring = math.MaxUint32 // the numbers in use: 1..MaxUint32
	d := (int64(a) - int64(b)) % ring
	if d < 0 {
		d += ring
	}
	if d > ring/2 {
		d -= ring
	}
	return d
}

// maxAsk bounds the sequence numbers one Republish round asks for, so that
// a server that skips numbers cannot make the Pair send thousands of
// requests at once; the rest are asked for in later rounds.
const maxAsk = 64

// sequencer puts one subscription's data messages back into the order of
// their sequence numbers, however many Publish requests are outstanding
// and whichever goroutine received each answer first. It is pure: it does
// no I/O and never reads the clock; the Pair's loop feeds it and executes
// what it asks for.
//
// A message that arrives ahead of a missing number is held until the gap
// fills. A gap still open after wait is due for recovery: the loop asks
// the server again (Republish) for the missing numbers that due returns,
// and reports each answer with answered. A number the server cannot give
// back is given up: it is lost, and delivery goes on after it. A message
// that was already handed on, held or given up is a duplicate and is
// dropped.
type sequencer[T any] struct {
	wait    time.Duration
	next    uint32             // the number of the next message to hand on
	horizon uint32             // one past the highest number known to have been sent
	held    map[uint32]slot[T] // numbers between next and horizon that arrived or were given up
	since   time.Time          // when a number not yet asked for went missing; zero: none is missing
	asking  bool               // a Republish round is under way
	askedTo uint32             // while asking: the numbers before it are being asked for
}

// slot is a held message, or a number given up.
type slot[T any] struct {
	v    T
	lost bool
}

// newSequencer returns the sequencer of a new subscription, whose first
// data message is number 1. A gap is due for recovery after wait.
func newSequencer[T any](wait time.Duration) *sequencer[T] {
	return &sequencer[T]{wait: wait, next: 1, horizon: 1, held: map[uint32]slot[T]{}}
}

// data takes data message seq, which carries v, and returns the messages
// that can be handed on now, in order; dup reports that seq was already
// handed on, held or given up, and v is dropped.
func (q *sequencer[T]) data(seq uint32, v T, now time.Time) (out []T, dup bool) {
	ahead := seqDiff(seq, q.next)
	if _, held := q.held[seq]; held || ahead < 0 || seq == 0 {
		return nil, true
	}
	if seqDiff(seq, q.horizon) >= 0 {
		q.horizon = seqNext(seq)
	}
	if ahead > 0 {
		q.held[seq] = slot[T]{v: v}
		q.track(now)
		return nil, false
	}
	out = append(out, v)
	q.next = seqNext(q.next)
	return q.drain(out, now), false
}

// keepAlive takes a keep-alive message that carries seq, the number of the
// next data message: every number before it has been sent, so one that has
// not arrived is missing. A keep-alive that was overtaken by the data
// message it announced says nothing new.
func (q *sequencer[T]) keepAlive(seq uint32, now time.Time) {
	if seq == 0 {
		return
	}
	if seqDiff(seq, q.horizon) > 0 {
		q.horizon = seq
	}
	q.track(now)
}

// due returns the missing numbers to ask the server for again, oldest
// first, once a gap has been open for the wait and no round is under way.
// The caller must answer every number it returns with answered, then call
// asked.
func (q *sequencer[T]) due(now time.Time) []uint32 {
	if q.asking || q.since.IsZero() || now.Sub(q.since) < q.wait {
		return nil
	}
	var ask []uint32
	n := q.next
	for ; n != q.horizon && len(ask) < maxAsk; n = seqNext(n) {
		if _, held := q.held[n]; !held {
			ask = append(ask, n)
		}
	}
	if len(ask) == 0 {
		q.since = time.Time{}
		return nil
	}
	q.asking, q.askedTo, q.since = true, n, time.Time{}
	q.track(now) // numbers beyond maxAsk wait for the next round
	return ask
}

// answered takes the server's answer for a number that due returned: the
// message (ok), or that the server cannot give it back. It returns the
// messages that can be handed on now; lost reports that seq was still
// missing and is given up (a message that arrived meanwhile by itself is
// not lost).
func (q *sequencer[T]) answered(seq uint32, v T, ok bool, now time.Time) (out []T, lost bool) {
	if ok {
		out, _ = q.data(seq, v, now)
		return out, false
	}
	if _, held := q.held[seq]; held || seqDiff(seq, q.next) < 0 || seqDiff(seq, q.horizon) >= 0 {
		return nil, false
	}
	q.held[seq] = slot[T]{lost: true}
	return q.drain(nil, now), true
}

// asked ends the Republish round: numbers that went missing meanwhile are
// due after their own wait.
func (q *sequencer[T]) asked(now time.Time) {
	q.asking = false
	q.track(now)
}

// deadline returns when the open gap is due for recovery.
func (q *sequencer[T]) deadline() (time.Time, bool) {
	if q.asking || q.since.IsZero() {
		return time.Time{}, false
	}
	return q.since.Add(q.wait), true
}

// settled reports that no number is missing: nothing is held, asked for
// or known to have been sent and not arrived.
func (q *sequencer[T]) settled() bool {
	return !q.asking && len(q.held) == 0 && seqDiff(q.horizon, q.next) <= 0
}

// pending reports how many messages are held back by a gap.
func (q *sequencer[T]) pending() int {
	n := 0
	for _, s := range q.held {
		if !s.lost {
			n++
		}
	}
	return n
}

// drain appends to out the held messages that follow next without a gap
// and moves next past them and past the numbers given up.
func (q *sequencer[T]) drain(out []T, now time.Time) []T {
	for {
		s, ok := q.held[q.next]
		if !ok {
			break
		}
		delete(q.held, q.next)
		if !s.lost {
			out = append(out, s.v)
		}
		q.next = seqNext(q.next)
	}
	q.track(now)
	return out
}

// track starts the wait when a number not yet asked for is missing, and
// stops it when none is.
func (q *sequencer[T]) track(now time.Time) {
	if !q.missingUnasked() {
		q.since = time.Time{}
		return
	}
	if q.since.IsZero() {
		q.since = now
	}
}

// missingUnasked reports whether a number between next and horizon has
// neither arrived nor been given up, and is not part of the round under
// way.
func (q *sequencer[T]) missingUnasked() bool {
	from := q.next
	if q.asking && seqDiff(q.askedTo, from) > 0 {
		from = q.askedTo
	}
	span := seqDiff(q.horizon, from)
	if span <= 0 {
		return false
	}
	inSpan := int64(0)
	for n := range q.held {
		if seqDiff(n, from) >= 0 {
			inSpan++
		}
	}
	return span > inSpan
}
