package uaclient

import (
	"cmp"
	"slices"
	"time"
)

// subscription is one OPC UA subscription of a session as the client keeps
// it (Part 4, 5.13): the server numbers its NotificationMessages, keeps
// each data message until the client acknowledges its number, and gives
// one back on request (Republish) while it keeps it. The subscription
// hands its data messages on in the order of their numbers, however the
// answers to the outstanding Publish requests arrive; asks again for a
// number that stays missing; gives up a number the server no longer has;
// and acknowledges each number it handed on or gave up, so that the server
// may forget it.
//
// A subscription outlives the session that created it: a session that
// activates the old OPC UA session on a new channel, or takes its
// subscriptions over by a transfer, takes the subscription with it, so
// that its numbering goes on.
//
// It is pure: it does no I/O and never reads the clock. The Pair's loop
// feeds it the server's answers and carries out what it returns (the
// messages to hand on, the numbers to acknowledge, the Republish requests
// to send).
type subscription struct {
	id   uint32
	name string // "health" or "data", for messages
	seq  *sequencer[[]dataNote]
	// afterStore: a number handed on is acknowledged only once what it
	// carried is stored (stored), not when it is handed on; the server
	// keeps the message until then, for a successor to ask for again.
	afterStore bool
	// acked is the first number not acknowledged (nor queued for it):
	// every number before it was handed on, or given up, and may be
	// forgotten by the server. Up to seq.next with afterStore; equal to
	// it without.
	acked uint32
	// quietFrom and quietTo bound, after a takeover whose server held no
	// message, the numbers a predecessor acknowledged after its last
	// record: not held, not lost (takenOver); quietTo is the first number
	// the server sent since. Zero: none.
	quietFrom, quietTo uint32
}

func newSubscription(id uint32, name string) *subscription {
	return &subscription{id: id, name: name, seq: newSequencer[[]dataNote](reorderWait), acked: 1}
}

// publishAnswer is what one Publish response said of a subscription.
type publishAnswer struct {
	seq       uint32     // the NotificationMessage's sequence number
	keepAlive bool       // no notifications: seq is the next data message's
	avail     []uint32   // the server's retransmission queue
	notes     []dataNote // the data notifications, of a data message
}

// step is what the loop does after a subscription took an answer: hand
// msgs on, in order, and acknowledge acks. With afterStore, the numbers
// handed on are not in acks: once what msgs carried is stored, the loop
// calls stored(mark); handed is how many numbers that covers.
type step struct {
	msgs   [][]dataNote
	acks   []uint32
	mark   uint32 // 0: nothing to wait for
	handed int
}

// settle acknowledges, or with afterStore marks for acknowledgement once
// stored, the numbers handed on or given up since from.
func (sb *subscription) settle(st *step, from uint32) {
	to := sb.seq.next
	if to == from {
		return
	}
	if sb.afterStore {
		st.mark, st.handed = to, int(seqDiff(to, from))
		return
	}
	st.acks = append(st.acks, handedOn(from, to)...)
	sb.acked = to
}

// stored reports that everything handed on before number to is stored:
// it returns the numbers the server may now forget.
func (sb *subscription) stored(to uint32) []uint32 {
	if seqDiff(to, sb.acked) <= 0 || seqDiff(to, sb.seq.next) > 0 {
		return nil
	}
	acks := handedOn(sb.acked, to)
	sb.acked = to
	return acks
}

// published takes a Publish response for the subscription.
func (sb *subscription) published(r publishAnswer, now time.Time) step {
	var st step
	q := sb.seq
	sb.raiseHorizon(r.avail, now)
	for _, n := range r.avail {
		if seqDiff(n, sb.acked) < 0 {
			// Acknowledged, and the acknowledgement went out on a
			// channel that broke: the server would keep it for ever. A
			// number handed on and not yet stored (afterStore) waits
			// for stored.
			st.acks = append(st.acks, n)
		}
	}
	first := sb.quietFrom != 0 && sb.quietTo == 0 && r.seq != 0
	if first {
		sb.quietTo = r.seq
	}
	from := q.next
	switch {
	case r.keepAlive:
		q.keepAlive(r.seq, now)
	case r.seq == 0:
		// Part 4 never numbers a data message 0: a server that does
		// cannot be put in order, so its messages go on as they come.
		st.msgs = [][]dataNote{r.notes}
	default:
		st.msgs, _ = q.data(r.seq, r.notes, now)
	}
	if first && !q.since.IsZero() {
		// The first answer after a takeover whose server held nothing:
		// the numbers before it were acknowledged by the predecessor
		// (or are on their way); one Republish round says which, at
		// once rather than after the reorder wait.
		q.since = now.Add(-q.wait)
	}
	sb.settle(&st, from)
	return st
}

// due returns the sequence numbers to ask the server for again
// (Republish), oldest first, once a gap has been open for the reorder
// wait; nil when none are. Every number returned must be answered with
// republished.
func (sb *subscription) due(now time.Time) []uint32 { return sb.seq.due(now) }

// republished is the server's answer to a Republish request for message
// seq: its notifications (ok), or why it could not be given back.
type republished struct {
	seq   uint32
	notes []dataNote
	ok    bool
	err   error
}

// roundResult is what a Republish round came to: the notifications given
// back, and the numbers given up, with the first reason why.
type roundResult struct {
	notes int
	lost  []uint32
	cause error
}

// republished takes the answers to a Republish round, in the order the
// numbers were asked for: a message given back fills its gap; a number
// the server no longer has is given up, and delivery goes on after it.
func (sb *subscription) republished(answers []republished, now time.Time) (step, roundResult) {
	var st step
	var rc roundResult
	q := sb.seq
	from := q.next
	for _, a := range answers {
		out, gone := q.answered(a.seq, a.notes, a.ok, now)
		st.msgs = append(st.msgs, out...)
		if gone && !sb.quiet(a.seq) {
			rc.lost = append(rc.lost, a.seq)
			rc.cause = cmp.Or(rc.cause, a.err)
		}
		if a.ok {
			rc.notes += len(a.notes)
		}
	}
	q.asked(now)
	sb.settle(&st, from)
	return st, rc
}

// resumed carries the subscription over to a new channel: a Republish
// round asked on the old one will never be answered, so its numbers are
// asked for again.
func (sb *subscription) resumed(now time.Time) { sb.seq.asked(now) }

// deadline returns when an open gap is due to be asked for again.
func (sb *subscription) deadline() (time.Time, bool) { return sb.seq.deadline() }

// settled reports that no number is missing, held back or being asked for.
func (sb *subscription) settled() bool { return sb.seq.settled() }

// raiseHorizon takes the numbers the server still holds
// (AvailableSequenceNumbers): one beyond what the subscription has seen was
// sent into a broken channel, and is asked for after the reorder wait.
func (sb *subscription) raiseHorizon(avail []uint32, now time.Time) {
	if len(avail) == 0 {
		return
	}
	top := slices.MaxFunc(avail, func(a, b uint32) int { return cmp.Compare(seqDiff(a, b), 0) })
	if top != 0 {
		sb.seq.keepAlive(seqNext(top), now)
	}
}

// handedOn returns the numbers from from up to (not including) to: the
// data messages the sequencer handed on, or gave up, which the server may
// now forget. Part 4: data messages are acknowledged, keep-alives (which
// use no number up) are not.
func handedOn(from, to uint32) []uint32 {
	var out []uint32
	for n := from; n != to; n = seqNext(n) {
		out = append(out, n)
	}
	return out
}

// reorderWait is how long a gap in a subscription's sequence numbers may
// stay open before the missing messages are asked for again (Republish).
// The answers to the outstanding Publish requests reach the loop from
// different goroutines, so a message can arrive a moment after the one
// that followed it on the wire; the wait lets it come by itself, as it
// nearly always does within a millisecond.
const reorderWait = 200 * time.Millisecond
