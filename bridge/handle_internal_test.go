package bridge

import (
	"math"
	"testing"
)

// The handle index Update uses gives exactly what the map gives, for the
// handles of the tags, for holes and for handles outside the span, dense
// or not; it is a slice only while at most half of its span is holes.
func TestHandleIndex(t *testing.T) {
	run := func(lo, hi, step uint32) []uint32 {
		var hs []uint32
		for h := lo; h <= hi && h >= lo; h += step {
			hs = append(hs, h)
		}
		return hs
	}
	for _, tc := range []struct {
		name    string
		handles []uint32
		dense   bool
	}{
		{"no tags", nil, false},
		{"one tag", []uint32{1}, true},
		{"10,000 from 1", run(1, 10000, 1), true},
		{"after changes: the first handles gone", run(5001, 15000, 1), true},
		{"every other handle gone", run(1, 20000, 2), true},
		{"two of every three gone", run(1, 30000, 3), false},
		{"one old tag beside new ones", append([]uint32{1}, run(1000001, 1010000, 1)...), false},
		{"small source with holes (the slack)", []uint32{1, 40, 70}, true},
		{"at the top of the range", []uint32{math.MaxUint32 - 1, math.MaxUint32}, true},
	} {
		r := &runner{byHandle: map[uint32]*tagState{}}
		for _, h := range tc.handles {
			r.byHandle[h] = &tagState{handle: h}
		}
		r.reindexLocked()
		if got := r.dense != nil; got != tc.dense {
			t.Errorf("%s: a slice %v, want %v", tc.name, got, tc.dense)
		}
		if r.dense != nil && len(r.dense) > 2*len(r.byHandle)+64 {
			t.Errorf("%s: %d slots for %d tags", tc.name, len(r.dense), len(r.byHandle))
		}
		probes := []uint32{0, 1, 2, 3, 39, 40, 41, 5000, 5001, 15000, 15001, 1000000, 1000001, math.MaxUint32 - 2, math.MaxUint32}
		for _, h := range tc.handles {
			probes = append(probes, h, h+1, h-1)
		}
		for _, h := range probes {
			if got, want := r.tagLocked(h), r.byHandle[h]; got != want {
				t.Fatalf("%s: handle %d gives %v, the map %v", tc.name, h, got, want)
			}
		}
	}
}
