package main

import (
	"testing"
	"time"
)

// The soak's check charges every kind of problem to the fault under way,
// and a number that arrives late is reordered, not lost.
func TestSoakCheck(t *testing.T) {
	type upd struct {
		kind string
		seq  uint64
		val  int64
		at   int // ms
	}
	cases := []struct {
		name    string
		updates []upd
		want    map[string]soakKind // by kind; MaxGap in ms
		skipped uint64
	}{
		{"in order", []upd{{"a", 1, 1, 0}, {"a", 2, 2, 100}, {"a", 3, 3, 200}},
			map[string]soakKind{"a": {MaxGap: 100}}, 0},
		{"a gap is lost, charged where it showed", []upd{{"a", 1, 1, 0}, {"b", 4, 4, 400}},
			map[string]soakKind{"a": {}, "b": {Lost: 2, Skipped: 2, MaxGap: 400}}, 2},
		// (A value that comes late was skipped when its successor came.)
		{"late is reordered, not lost", []upd{{"a", 1, 1, 0}, {"a", 3, 3, 100}, {"b", 2, 2, 150}},
			map[string]soakKind{"a": {Skipped: 1, MaxGap: 100}, "b": {Reordered: 1, MaxGap: 50}}, 1},
		{"a repeat is duplicated", []upd{{"a", 1, 1, 0}, {"a", 2, 2, 100}, {"b", 2, 2, 150}},
			map[string]soakKind{"a": {MaxGap: 100}, "b": {Duplicated: 1}}, 0},
		{"a refresh repeating a value skips none", []upd{{"a", 1, 5, 0}, {"a", 2, 5, 100}, {"a", 3, 6, 200}},
			map[string]soakKind{"a": {MaxGap: 100}}, 0},
		{"source values skipped by a new active", []upd{{"a", 1, 5, 0}, {"a", 2, 9, 100}},
			map[string]soakKind{"a": {Skipped: 3, MaxGap: 100}}, 3},
		// 1-62 go missing before the first number seen, 65-129 later.
		{"numbers beyond a word of the bitset", []upd{{"a", 63, 1, 0}, {"a", 64, 2, 100}, {"a", 130, 68, 200}, {"a", 64, 2, 300}},
			map[string]soakKind{"a": {Lost: 62 + 65, Duplicated: 1, Skipped: 65, MaxGap: 100}}, 65},
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			chk := newSoakCheck()
			for _, u := range c.updates {
				chk.record(soakWhere{u.kind, 1}, "soak.line1.Counter0", true, u.seq, u.val, t0.Add(time.Duration(u.at)*time.Millisecond))
			}
			got := chk.totals()
			for k, w := range c.want {
				g := got.Kinds[k]
				w.MaxGap *= time.Millisecond
				if g != w {
					t.Errorf("kind %s: got %+v, want %+v", k, g, w)
				}
			}
			if got.Skipped != c.skipped {
				t.Errorf("skipped %d, want %d", got.Skipped, c.skipped)
			}
		})
	}
}

// Only counters' silences and values count; every tag's numbers do.
func TestSoakCheckNonCounter(t *testing.T) {
	chk := newSoakCheck()
	t0 := time.Now()
	chk.record(soakWhere{"a", 2}, "soak.line1.Bool0", false, 1, true, t0)
	chk.record(soakWhere{"a", 2}, "soak.line1.Bool0", false, 3, false, t0.Add(time.Hour))
	got := chk.totals().Kinds["a"]
	if got.Lost != 1 || got.MaxGap != 0 || got.Skipped != 0 {
		t.Fatalf("got %+v, want 1 lost, no gap, nothing skipped", got)
	}
	if chk.seenSince([]string{"soak.line1.Bool0"}, t0) {
		t.Fatal("a non-counter counted as a counter's update")
	}
	// The control: a counter is seen.
	chk.record(soakWhere{"a", 2}, "soak.line1.Counter0", true, 1, int64(1), t0)
	if !chk.seenSince([]string{"soak.line1.Counter0"}, t0) {
		t.Fatal("a counter's update not seen")
	}
}

// The stream audit excuses a missing number the callback vouches for.
func TestSoakCheckExcuse(t *testing.T) {
	chk := newSoakCheck()
	t0 := time.Now()
	chk.record(soakWhere{"a", 2}, "k", true, 1, int64(1), t0)
	chk.record(soakWhere{"a", 2}, "k", true, 4, int64(4), t0)
	if n := chk.excuse(func(_ string, seq uint64) bool { return seq == 2 }); n != 1 {
		t.Fatalf("excused %d, want 1", n)
	}
	if got := chk.totals(); got.Lost != 1 || got.LostExamples[0] != "k #3 (a, cycle 2)" {
		t.Fatalf("got %+v, want #3 lost", got)
	}
}
