package uaclient

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
)

// msg is data message seq, carrying one notification whose value is seq.
func msg(seq uint32, avail ...uint32) publishAnswer {
	return publishAnswer{seq: seq, avail: avail, notes: []dataNote{{handle: 1, dv: &ua.DataValue{Value: ua.MustVariant(int64(seq))}}}}
}

func keepAlive(next uint32, avail ...uint32) publishAnswer {
	return publishAnswer{seq: next, keepAlive: true, avail: avail}
}

// values returns what msgs carry, in order.
func values(msgs [][]dataNote) []int64 {
	var out []int64
	for _, notes := range msgs {
		for _, n := range notes {
			out = append(out, n.dv.Value.Value().(int64))
		}
	}
	return out
}

// The subscription hands data messages on in sequence-number order and
// acknowledges exactly what it handed on: keep-alives use no number up and
// are never acknowledged, a message held behind a gap is acknowledged only
// when it goes on, and a number the server still holds though it was
// handed on (its acknowledgement went into a broken channel) is
// acknowledged again.
func TestSubscriptionPublished(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	type want struct {
		values []int64
		acks   []uint32
	}
	for _, tc := range []struct {
		name  string
		steps []publishAnswer
		want  []want // one per step
	}{
		{"in order", []publishAnswer{msg(1), msg(2), msg(3)},
			[]want{{[]int64{1}, []uint32{1}}, {[]int64{2}, []uint32{2}}, {[]int64{3}, []uint32{3}}}},
		{"a keep-alive is not acknowledged", []publishAnswer{keepAlive(1), msg(1), keepAlive(2)},
			[]want{{nil, nil}, {[]int64{1}, []uint32{1}}, {nil, nil}}},
		{"overtaken: held until the gap fills, then both", []publishAnswer{msg(2), msg(1)},
			[]want{{nil, nil}, {[]int64{1, 2}, []uint32{1, 2}}}},
		{"a duplicate goes nowhere", []publishAnswer{msg(1), msg(1)},
			[]want{{[]int64{1}, []uint32{1}}, {nil, nil}}},
		{"handed on but still held by the server: acknowledged again", []publishAnswer{msg(1), keepAlive(2, 1)},
			[]want{{[]int64{1}, []uint32{1}}, {nil, []uint32{1}}}},
		{"numbered 0, against Part 4: passed on as it comes, not acknowledged", []publishAnswer{msg(0), msg(0)},
			[]want{{[]int64{0}, nil}, {[]int64{0}, nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSubscription(7, "data")
			for i, p := range tc.steps {
				st := sb.published(p, at)
				got := want{values(st.msgs), st.acks}
				if !slices.Equal(got.values, tc.want[i].values) || !slices.Equal(got.acks, tc.want[i].acks) {
					t.Fatalf("step %d: handed on %v, acknowledged %v; want %v, %v", i, got.values, got.acks, tc.want[i].values, tc.want[i].acks)
				}
			}
		})
	}
}

// A gap open for the reorder wait is asked for again (Republish); what the
// server gives back fills it, what it no longer has is given up and
// reported, and delivery goes on after it. Every number handed on or given
// up is acknowledged.
func TestSubscriptionRepublish(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sb := newSubscription(7, "data")
	sb.published(msg(1), at)
	sb.published(msg(4), at) // 2 and 3 missing
	if ask := sb.due(at.Add(reorderWait - time.Millisecond)); ask != nil {
		t.Fatalf("asked for %v before the reorder wait", ask)
	}
	if d, ok := sb.deadline(); !ok || !d.Equal(at.Add(reorderWait)) {
		t.Fatalf("deadline %v %v, want the reorder wait", d, ok)
	}
	now := at.Add(reorderWait)
	ask := sb.due(now)
	if !slices.Equal(ask, []uint32{2, 3}) {
		t.Fatalf("asked for %v, want [2 3]", ask)
	}
	if sb.settled() {
		t.Fatal("settled with a Republish round under way")
	}
	gone := fmt.Errorf("republish: %w", ua.StatusBadMessageNotAvailable)
	st, rc := sb.republished([]republished{
		{seq: 2, ok: true, notes: msg(2).notes},
		{seq: 3, err: gone},
	}, now)
	if got := values(st.msgs); !slices.Equal(got, []int64{2, 4}) {
		t.Errorf("handed on %v, want 2 then 4 (3 given up)", got)
	}
	if !slices.Equal(st.acks, []uint32{2, 3, 4}) {
		t.Errorf("acknowledged %v, want [2 3 4]", st.acks)
	}
	if !slices.Equal(rc.lost, []uint32{3}) || !errors.Is(rc.cause, ua.StatusBadMessageNotAvailable) || rc.notes != 1 {
		t.Errorf("recovery %+v, want 3 lost for Bad_MessageNotAvailable and one notification given back", rc)
	}
	if !sb.settled() {
		t.Error("not settled after the round")
	}
}

// A message that arrives by itself during the Republish round is not lost
// when the server no longer has it.
func TestSubscriptionLateMessageIsNotLost(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sb := newSubscription(7, "data")
	sb.published(msg(2), at)
	now := at.Add(reorderWait)
	if ask := sb.due(now); !slices.Equal(ask, []uint32{1}) {
		t.Fatalf("asked for %v", ask)
	}
	st := sb.published(msg(1), now)
	if got := values(st.msgs); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("handed on %v", got)
	}
	_, rc := sb.republished([]republished{{seq: 1, err: ua.StatusBadMessageNotAvailable}}, now)
	if len(rc.lost) != 0 {
		t.Fatalf("lost %v, though it arrived", rc.lost)
	}
}

// The numbers the server still holds (AvailableSequenceNumbers) reveal a
// message sent into a broken channel: it is asked for after the wait.
// Carried over to a new channel, a round asked on the old one is asked
// again.
func TestSubscriptionAvailableAndResumed(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sb := newSubscription(7, "data")
	sb.published(msg(1), at)
	sb.published(keepAlive(2, 2, 3), at) // 2 and 3 were sent, never arrived
	now := at.Add(reorderWait)
	if ask := sb.due(now); !slices.Equal(ask, []uint32{2, 3}) {
		t.Fatalf("asked for %v, want [2 3]", ask)
	}
	// The channel broke before the answers came: a new session takes the
	// subscription over.
	sb.resumed(now)
	later := now.Add(reorderWait)
	if ask := sb.due(later); !slices.Equal(ask, []uint32{2, 3}) {
		t.Fatalf("after resuming, asked for %v, want [2 3] again", ask)
	}
}

// With afterStore, a number handed on is acknowledged only once it is
// stored: the server listing it as held before then does not get it
// acknowledged, after then it is acknowledged again; stored acknowledges
// everything before its mark once, whatever order the marks come in.
func TestSubscriptionAcknowledgesAfterStore(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	type op struct {
		pub      *publishAnswer // a Publish answer, or
		stored   uint32         // a mark stored
		acks     []uint32
		mark     uint32
		handedOn int
	}
	pa := func(a publishAnswer) *publishAnswer { return &a }
	for _, tc := range []struct {
		name string
		ops  []op
	}{
		{"marked, then acknowledged once stored", []op{
			{pub: pa(msg(1)), mark: 2, handedOn: 1},
			{pub: pa(msg(2)), mark: 3, handedOn: 1},
			{stored: 2, acks: []uint32{1}},
			{stored: 3, acks: []uint32{2}},
		}},
		{"held by the server and not stored: not acknowledged", []op{
			{pub: pa(msg(1)), mark: 2, handedOn: 1},
			{pub: pa(keepAlive(2, 1))},
			{stored: 2, acks: []uint32{1}},
			{pub: pa(keepAlive(2, 1)), acks: []uint32{1}}, // the ack went into a broken channel
		}},
		{"a later mark stored first covers the earlier", []op{
			{pub: pa(msg(1)), mark: 2, handedOn: 1},
			{pub: pa(msg(2)), mark: 3, handedOn: 1},
			{stored: 3, acks: []uint32{1, 2}},
			{stored: 2},
		}},
		{"a gap filled: one mark for both", []op{
			{pub: pa(msg(2))},
			{pub: pa(msg(1)), mark: 3, handedOn: 2},
			{stored: 3, acks: []uint32{1, 2}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSubscription(7, "data")
			sb.afterStore = true
			for i, o := range tc.ops {
				var acks []uint32
				if o.pub != nil {
					st := sb.published(*o.pub, at)
					acks = st.acks
					if st.mark != o.mark || st.handed != o.handedOn {
						t.Fatalf("op %d: mark %d covering %d, want %d covering %d", i, st.mark, st.handed, o.mark, o.handedOn)
					}
				} else {
					acks = sb.stored(o.stored)
				}
				if !slices.Equal(acks, o.acks) {
					t.Fatalf("op %d: acks %v, want %v", i, acks, o.acks)
				}
			}
		})
	}
}
