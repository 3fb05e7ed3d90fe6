package uaclient

import (
	"slices"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
)

func sample(v int64, st ua.StatusCode) dataNote {
	return dataNote{handle: 1, dv: &ua.DataValue{Value: ua.MustVariant(v), Status: st}}
}

func samples(ns []dataNote) []int64 {
	var out []int64
	for _, n := range ns {
		out = append(out, n.dv.Value.Value().(int64))
	}
	return out
}

// A hold starts at the first Bad_OutOfService sample and keeps everything
// after it, in order; released for a promotion it drops the
// Bad_OutOfService samples, released at its bound it lets all go on.
func TestOutOfServiceHold(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	good, oos := ua.StatusOK, ua.StatusBadOutOfService
	pass, h := holdFrom(nil, []dataNote{sample(1, good), sample(2, good)}, at)
	if h != nil || !slices.Equal(samples(pass), []int64{1, 2}) {
		t.Fatalf("Good data held: pass %v, hold %v", samples(pass), h)
	}
	for _, replaced := range []bool{true, false} {
		pass, h = holdFrom(nil, []dataNote{sample(1, good), sample(2, oos), sample(3, good)}, at)
		if h == nil || !slices.Equal(samples(pass), []int64{1}) {
			t.Fatalf("pass %v, hold %v: want 1 on, the rest held from the Bad_OutOfService sample", samples(pass), h)
		}
		h.add([]dataNote{sample(4, oos), sample(5, good)})
		if h.expired(at.Add(maxOutOfServiceHold-time.Millisecond)) || !h.expired(at.Add(maxOutOfServiceHold)) {
			t.Fatalf("expiry not at the bound %v", maxOutOfServiceHold)
		}
		keep, dropped := h.release(replaced)
		want, wantDropped := []int64{2, 3, 4, 5}, 0
		if replaced {
			want, wantDropped = []int64{3, 5}, 2
		}
		if !slices.Equal(samples(keep), want) || dropped != wantDropped {
			t.Errorf("replaced %v: kept %v, dropped %d; want %v, %d", replaced, samples(keep), dropped, want, wantDropped)
		}
	}
}
