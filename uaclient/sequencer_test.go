package uaclient

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestSeqArithmetic(t *testing.T) {
	const top = math.MaxUint32
	for _, tc := range []struct {
		a, b uint32
		want int64
	}{
		{5, 5, 0},
		{6, 5, 1},
		{5, 6, -1},
		{1, top, 1},      // the wrap skips 0
		{top, 1, -1},     // and back
		{2, top - 1, 3},  // top-1, top, 1, 2
		{top - 1, 2, -3}, // the same, seen from the other end
		{1 << 31, 1, 1<<31 - 1},
	} {
		if got := seqDiff(tc.a, tc.b); got != tc.want {
			t.Errorf("seqDiff(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if seqNext(top) != 1 || seqNext(1) != 2 || seqNext(top-1) != top {
		t.Errorf("seqNext: %d %d %d", seqNext(top), seqNext(1), seqNext(top-1))
	}
}

// seqOp is one thing that happens to a sequencer, at a millisecond of a
// test's timeline.
type seqOp struct {
	ms  int
	op  string // data, ka (keep-alive), due, ok (Republish answered), lost (Republish failed), asked
	seq uint32
}

// seqWant is what a timeline must produce. Messages carry their own
// sequence number, so the output is the order they were handed on in.
type seqWant struct {
	out   []uint32
	dups  []uint32   // data messages dropped as duplicates
	asks  [][]uint32 // what each due that asked for something returned
	lost  []uint32   // numbers given up
	held  int        // messages still held at the end
	until int        // the gap's deadline at the end, in ms; -1: none
}

func TestSequencer(t *testing.T) {
	const top = math.MaxUint32
	for _, tc := range []struct {
		name  string
		start uint32 // next number at the start; 0: a new subscription (1)
		ops   []seqOp
		want  seqWant
	}{
		{name: "in order", ops: []seqOp{{0, "data", 1}, {1, "data", 2}, {2, "data", 3}},
			want: seqWant{out: []uint32{1, 2, 3}, until: -1}},
		{name: "out-of-order pair", ops: []seqOp{{0, "data", 2}, {0, "data", 1}, {1, "data", 3}},
			want: seqWant{out: []uint32{1, 2, 3}, until: -1}},
		{name: "the first message overtaken", ops: []seqOp{{0, "data", 3}, {0, "data", 2}, {0, "data", 1}},
			want: seqWant{out: []uint32{1, 2, 3}, until: -1}},
		{name: "a gap held, filled late but within the wait: no Republish",
			ops:  []seqOp{{0, "data", 1}, {0, "data", 3}, {0, "data", 4}, {100, "due", 0}, {249, "due", 0}, {249, "data", 2}, {400, "due", 0}},
			want: seqWant{out: []uint32{1, 2, 3, 4}, until: -1}},
		{name: "a held gap's deadline", ops: []seqOp{{0, "data", 1}, {10, "data", 3}, {20, "data", 5}},
			want: seqWant{out: []uint32{1}, held: 2, until: 260}},
		{name: "a gap recovered by Republish",
			ops:  []seqOp{{0, "data", 1}, {0, "data", 3}, {250, "due", 0}, {251, "data", 4}, {252, "ok", 2}, {252, "asked", 0}, {253, "data", 5}},
			want: seqWant{out: []uint32{1, 2, 3, 4, 5}, asks: [][]uint32{{2}}, until: -1}},
		{name: "a gap of two recovered in one round",
			ops:  []seqOp{{0, "data", 1}, {0, "data", 4}, {250, "due", 0}, {251, "ok", 2}, {252, "ok", 3}, {252, "asked", 0}},
			want: seqWant{out: []uint32{1, 2, 3, 4}, asks: [][]uint32{{2, 3}}, until: -1}},
		{name: "an unrecoverable gap is given up and delivery goes on",
			ops:  []seqOp{{0, "data", 1}, {0, "data", 3}, {5, "data", 4}, {250, "due", 0}, {251, "lost", 2}, {251, "asked", 0}, {260, "data", 5}},
			want: seqWant{out: []uint32{1, 3, 4, 5}, asks: [][]uint32{{2}}, lost: []uint32{2}, until: -1}},
		{name: "half of a gap recovered, half given up",
			ops:  []seqOp{{0, "data", 1}, {0, "data", 5}, {250, "due", 0}, {251, "lost", 2}, {251, "ok", 3}, {251, "lost", 4}, {251, "asked", 0}},
			want: seqWant{out: []uint32{1, 3, 5}, asks: [][]uint32{{2, 3, 4}}, lost: []uint32{2, 4}, until: -1}},
		{name: "the message arrives by itself while Republish fails: not lost, not twice",
			ops:  []seqOp{{0, "data", 1}, {0, "data", 3}, {250, "due", 0}, {251, "data", 2}, {252, "lost", 2}, {252, "asked", 0}},
			want: seqWant{out: []uint32{1, 2, 3}, asks: [][]uint32{{2}}, until: -1}},
		{name: "the message arrives by itself and again by Republish: handed on once",
			ops:  []seqOp{{0, "data", 1}, {0, "data", 3}, {250, "due", 0}, {251, "data", 2}, {252, "ok", 2}, {252, "asked", 0}},
			want: seqWant{out: []uint32{1, 2, 3}, asks: [][]uint32{{2}}, until: -1}},
		{name: "one round at a time; a gap opened during it has its own wait",
			ops: []seqOp{{0, "data", 1}, {0, "data", 3}, {250, "due", 0}, {260, "data", 5}, {300, "due", 0}, {300, "lost", 2}, {300, "asked", 0},
				{400, "due", 0}, {510, "due", 0}, {511, "ok", 4}, {511, "asked", 0}},
			want: seqWant{out: []uint32{1, 3, 4, 5}, asks: [][]uint32{{2}, {4}}, lost: []uint32{2}, until: -1}},
		{name: "no second round while one is under way",
			ops: []seqOp{{0, "data", 1}, {0, "data", 3}, {250, "due", 0}, {260, "data", 5}, {600, "due", 0}, {600, "lost", 2}, {600, "asked", 0},
				{600, "due", 0}, {601, "ok", 4}, {601, "asked", 0}},
			want: seqWant{out: []uint32{1, 3, 4, 5}, asks: [][]uint32{{2}, {4}}, lost: []uint32{2}, until: -1}},

		// Keep-alives carry the next number and use none up.
		{name: "keep-alives in step use no number", ops: []seqOp{{0, "ka", 1}, {1, "ka", 1}, {2, "data", 1}, {3, "ka", 2}, {4, "data", 2}, {5, "ka", 3}, {300, "due", 0}},
			want: seqWant{out: []uint32{1, 2}, until: -1}},
		{name: "a keep-alive overtaken by the message it announced says nothing",
			ops:  []seqOp{{0, "data", 1}, {1, "data", 2}, {1, "ka", 2}, {1, "ka", 1}, {300, "due", 0}},
			want: seqWant{out: []uint32{1, 2}, until: -1}},
		{name: "a keep-alive ahead reveals a missing message",
			ops:  []seqOp{{0, "data", 1}, {10, "ka", 3}, {260, "due", 0}, {261, "ok", 2}, {261, "asked", 0}},
			want: seqWant{out: []uint32{1, 2}, asks: [][]uint32{{2}}, until: -1}},
		{name: "a keep-alive ahead, and the message arrives in time",
			ops:  []seqOp{{0, "data", 1}, {10, "ka", 3}, {20, "data", 2}, {300, "due", 0}},
			want: seqWant{out: []uint32{1, 2}, until: -1}},
		{name: "a lost message revealed only by a keep-alive",
			ops:  []seqOp{{0, "ka", 2}, {250, "due", 0}, {251, "lost", 1}, {251, "asked", 0}, {260, "data", 2}},
			want: seqWant{out: []uint32{2}, asks: [][]uint32{{1}}, lost: []uint32{1}, until: -1}},

		// Wrap-around: after 4294967295 comes 1.
		{name: "wrap in order", start: top - 1, ops: []seqOp{{0, "data", top - 1}, {1, "data", top}, {2, "data", 1}, {3, "data", 2}},
			want: seqWant{out: []uint32{top - 1, top, 1, 2}, until: -1}},
		{name: "wrap out of order", start: top - 1, ops: []seqOp{{0, "data", 1}, {0, "data", top}, {0, "data", top - 1}, {1, "data", 2}},
			want: seqWant{out: []uint32{top - 1, top, 1, 2}, until: -1}},
		{name: "a gap across the wrap is asked for", start: top, ops: []seqOp{{0, "data", 2}, {250, "due", 0}, {251, "ok", top}, {251, "lost", 1}, {251, "asked", 0}},
			want: seqWant{out: []uint32{top, 2}, asks: [][]uint32{{top, 1}}, lost: []uint32{1}, until: -1}},
		{name: "a keep-alive across the wrap", start: top, ops: []seqOp{{0, "data", top}, {1, "ka", 1}, {2, "data", 1}, {300, "due", 0}},
			want: seqWant{out: []uint32{top, 1}, until: -1}},

		// Duplicates are handed on once.
		{name: "a message delivered twice", ops: []seqOp{{0, "data", 1}, {1, "data", 1}, {2, "data", 2}},
			want: seqWant{out: []uint32{1, 2}, dups: []uint32{1}, until: -1}},
		{name: "a held message delivered twice", ops: []seqOp{{0, "data", 1}, {1, "data", 3}, {2, "data", 3}, {3, "data", 2}},
			want: seqWant{out: []uint32{1, 2, 3}, dups: []uint32{3}, until: -1}},
		{name: "a message given up that turns up later is dropped",
			ops:  []seqOp{{0, "data", 1}, {0, "data", 3}, {250, "due", 0}, {251, "lost", 2}, {251, "asked", 0}, {300, "data", 2}},
			want: seqWant{out: []uint32{1, 3}, asks: [][]uint32{{2}}, lost: []uint32{2}, dups: []uint32{2}, until: -1}},
		{name: "number 0 is never a data message", ops: []seqOp{{0, "data", 0}, {0, "ka", 0}, {1, "data", 1}},
			want: seqWant{out: []uint32{1}, dups: []uint32{0}, until: -1}},

		// A server that skips many numbers is asked in bounded rounds.
		{name: "a large gap is asked for in rounds of maxAsk",
			ops:  []seqOp{{0, "data", 1}, {0, "data", maxAsk + 3}, {250, "due", 0}, {250, "asked", 0}},
			want: seqWant{out: []uint32{1}, asks: [][]uint32{seqRange(2, maxAsk+1)}, held: 1, until: 500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
			q := newSequencer[uint32](250 * time.Millisecond)
			if tc.start != 0 {
				q.next, q.horizon = tc.start, tc.start
			}
			var got seqWant
			got.until = -1
			for _, o := range tc.ops {
				now := at(o.ms)
				switch o.op {
				case "data":
					out, dup := q.data(o.seq, o.seq, now)
					got.out = append(got.out, out...)
					if dup {
						got.dups = append(got.dups, o.seq)
					}
				case "ka":
					q.keepAlive(o.seq, now)
				case "due":
					if ask := q.due(now); ask != nil {
						got.asks = append(got.asks, ask)
					}
				case "ok", "lost":
					out, lost := q.answered(o.seq, o.seq, o.op == "ok", now)
					got.out = append(got.out, out...)
					if lost {
						got.lost = append(got.lost, o.seq)
					}
				case "asked":
					q.asked(now)
				default:
					t.Fatalf("unknown op %q", o.op)
				}
			}
			got.held = q.pending()
			if d, ok := q.deadline(); ok {
				got.until = int(d.Sub(t0) / time.Millisecond)
			}
			if !slices.Equal(got.out, tc.want.out) {
				t.Errorf("handed on %v, want %v", got.out, tc.want.out)
			}
			if !slices.Equal(got.dups, tc.want.dups) {
				t.Errorf("duplicates %v, want %v", got.dups, tc.want.dups)
			}
			if !slices.EqualFunc(got.asks, tc.want.asks, slices.Equal) {
				t.Errorf("Republish rounds %v, want %v", got.asks, tc.want.asks)
			}
			if !slices.Equal(got.lost, tc.want.lost) {
				t.Errorf("given up %v, want %v", got.lost, tc.want.lost)
			}
			if got.held != tc.want.held {
				t.Errorf("%d held at the end, want %d", got.held, tc.want.held)
			}
			if got.until != tc.want.until {
				t.Errorf("deadline at %d ms, want %d", got.until, tc.want.until)
			}
		})
	}
}

func seqRange(from, to uint32) []uint32 {
	var out []uint32
	for n := from; n <= to; n++ {
		out = append(out, n)
	}
	return out
}
