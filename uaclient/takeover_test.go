package uaclient

import (
	"slices"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
)

// A subscription taken over from a predecessor that recorded `recorded`
// as its first unacknowledged number: what the server still holds before
// it is acknowledged, the rest asked for at once (Republish), a number
// the server no longer holds before the oldest it holds is skipped (the
// predecessor acknowledged it after its record), and with nothing held
// the numbers before the first the server sends are asked for at once,
// and one the server cannot give back is given up quietly, one after it
// reported lost.
func TestSubscriptionTakenOver(t *testing.T) {
	at := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		recorded uint32
		avail    []uint32
		acks     []uint32 // acknowledged at once
		ask      []uint32 // asked for at once
		// then: the server answers msg(first), and gone says the
		// Republish of these numbers found nothing; lost is what is
		// reported lost of them.
		first uint32
		gone  []uint32
		lost  []uint32
	}{
		{name: "held from the record on", recorded: 5, avail: []uint32{5, 6, 7}, ask: []uint32{5, 6, 7}},
		{name: "held before the record: acknowledged", recorded: 5, avail: []uint32{3, 4, 5, 6}, acks: []uint32{3, 4}, ask: []uint32{5, 6}},
		{name: "acknowledged after the record: skipped", recorded: 5, avail: []uint32{8, 9}, ask: []uint32{8, 9}},
		{name: "nothing held, a stale record: given up quietly", recorded: 5, first: 9, gone: []uint32{5, 6, 7, 8}},
		{name: "nothing held, a gap after the first: lost", recorded: 5, first: 9, gone: []uint32{5, 6, 7, 8, 10}, lost: []uint32{10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSubscription(7, "data")
			sb.afterStore = true
			sb.seq.next, sb.seq.horizon, sb.acked = tc.recorded, tc.recorded, tc.recorded
			acks := sb.takenOver(tc.avail, at)
			if !slices.Equal(acks, tc.acks) {
				t.Fatalf("acknowledged %v at once, want %v", acks, tc.acks)
			}
			ask := sb.due(at)
			if !slices.Equal(ask, tc.ask) {
				t.Fatalf("asked for %v at once, want %v", ask, tc.ask)
			}
			if ask != nil {
				var answers []republished
				for _, n := range ask {
					answers = append(answers, republished{seq: n, ok: true, notes: msg(n).notes})
				}
				st, rc := sb.republished(answers, at)
				if got := values(st.msgs); len(got) != len(ask) || got[0] != int64(ask[0]) || len(rc.lost) != 0 {
					t.Fatalf("republished: handed on %v, lost %v", got, rc.lost)
				}
				return
			}
			if tc.first == 0 {
				return
			}
			later := at.Add(time.Second)
			sb.published(msg(tc.first), later)
			for _, n := range tc.gone {
				if n > tc.first {
					sb.published(msg(n+1), later) // the gap after the first
				}
			}
			// Asked for at once, not after the reorder wait.
			ask = sb.due(later)
			if !slices.Equal(ask, tc.gone) {
				t.Fatalf("asked for %v at once, want %v", ask, tc.gone)
			}
			var answers []republished
			for _, n := range ask {
				answers = append(answers, republished{seq: n, err: ua.StatusBadMessageNotAvailable})
			}
			_, rc := sb.republished(answers, later)
			if !slices.Equal(rc.lost, tc.lost) {
				t.Fatalf("asked for %v, reported lost %v, want %v", ask, rc.lost, tc.lost)
			}
		})
	}
}
