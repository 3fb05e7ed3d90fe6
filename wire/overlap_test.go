package wire

import "testing"

// decoy is a pattern no test subject meets: the one looked for, listed
// before it, must be the one found.
const decoy = "zz.zz.zz.zz.zz.zz"

func TestPatternsOverlapping(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"apbridge.status", "apbridge.status", true},
		{"apbridge.write.x", "apbridge.write.>", true},
		{"apbridge.write", "apbridge.write.>", false},
		{"apbridge.>", "apbridge.status", true},
		{"apbridge.*", "apbridge.write.>", false},
		{"apbridge.*.x", "apbridge.write.>", true},
		{"plant.>", "apbridge.>", false},
		{"*.*", "apbridge.status", true},
		{"a.b.c", "a.b", false},
		{">", "$SRV.PING", true},
		{"*.>", "$SRV.>", true},
		{"a.*.c", "a.b.*", true},
		{"a.*.c", "a.b.d", false},
	}
	for _, tt := range tests {
		for _, q := range [][2]string{{tt.a, tt.b}, {tt.b, tt.a}} {
			got, ok := NewPatterns(q[1], decoy).Overlapping(q[0])
			if ok != tt.want || ok && got != q[1] {
				t.Errorf("%q overlapping %q: %q, %v; want %v", q[0], q[1], got, ok, tt.want)
			}
		}
	}
}

func TestPatternsCovering(t *testing.T) {
	tests := []struct {
		sub, pattern string
		want         bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.*", true},
		{"a.b", "a.>", true},
		{"a.b.c", "a.>", true},
		{"a", "a.>", false},
		{"a.*", "a.>", true},
		{"a.>", "a.>", true},
		{"a.>", "a.*", false},
		{"a.*", "a.b", false},
		{"a.b", "a.c", false},
		{"a.b.c", "a.*", false},
		{"a.b", "a.b.c", false},
		{"a.b", ">", true},
		{"*.b", "a.*", false},
		{"a.*.c", "a.*.*", true},
	}
	for _, tt := range tests {
		got, ok := NewPatterns(tt.pattern, decoy).Covering(tt.sub)
		if ok != tt.want || ok && got != tt.pattern {
			t.Errorf("%q within %q: %q, %v; want %v", tt.sub, tt.pattern, got, ok, tt.want)
		}
	}
	// Within implies overlap, for any two of the patterns above.
	for _, a := range tests {
		for _, b := range tests {
			_, within := NewPatterns(b.pattern).Covering(a.sub)
			_, meet := NewPatterns(b.pattern).Overlapping(a.sub)
			if within && !meet {
				t.Errorf("%q is within %q but does not overlap it", a.sub, b.pattern)
			}
		}
	}
}

func TestMapperCanOverlap(t *testing.T) {
	tests := []struct {
		template, source, pattern string
		want                      bool
	}{
		{"apbridge.{source}.{tag}", "write", "apbridge.write.>", true},
		{"apbridge.{source}.{tag}", "line1", "apbridge.write.>", false},
		{"apbridge.{source}.{tag}", "status", "apbridge.status", false},
		{"apbridge.{tag}", "line1", "apbridge.write.>", true},
		{"apbridge.{tag}", "line1", "apbridge.status", true},
		{"apbridge.x{tagid}", "line1", "apbridge.status", false},
		{"apbridge.s{tagid}", "line1", "apbridge.status", true},
		{"apbridge.{tagid}x", "line1", "apbridge.status", false},
		{"plant.{source}.{tag}.v", "l", "plant.l.a.b.v", true},
		{"plant.{source}.{tag}.v", "l", "plant.l.v", false},
		{"{source}.{address}", "apbridge", "apbridge.snapshot", true},
	}
	for _, tt := range tests {
		m, err := NewMapper(tt.template)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.CanOverlap(tt.source, tt.pattern); got != tt.want {
			t.Errorf("%q with source %q vs %q: %v, want %v", tt.template, tt.source, tt.pattern, got, tt.want)
		}
	}
}

// The token-by-token overlap answers as the search does wherever it is
// used: on every pair of subjects and patterns of a small alphabet, with
// "*" and ">" and templates' partial tokens among them.
func TestOverlapLinearAgrees(t *testing.T) {
	toks := []ptok{{pre: "a"}, {pre: "b"}, {pre: "ab"}, {kind: tokOne}, {kind: tokMany},
		{kind: tokOne, pre: "a"}, {kind: tokOne, suf: "b"}}
	var seqs [][]ptok
	var gen func(prefix []ptok)
	gen = func(prefix []ptok) {
		if len(prefix) > 0 {
			seqs = append(seqs, prefix)
		}
		if len(prefix) == 3 || len(prefix) > 0 && prefix[len(prefix)-1].kind == tokMany {
			return
		}
		for _, tk := range toks {
			gen(append(append([]ptok(nil), prefix...), tk))
		}
	}
	gen(nil)
	checked := 0
	for _, a := range seqs {
		for _, b := range seqs {
			if !manyOnlyLast(a) || !manyOnlyLast(b) {
				t.Fatalf("the generator made a sequence with an inner '>': %v %v", a, b)
			}
			if got, want := overlapLinear(a, b), overlapSearch(a, b); got != want {
				t.Fatalf("overlap of %v and %v: linear %v, search %v", a, b, got, want)
			}
			checked++
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d pairs checked", checked)
	}
	// reservedOf takes the reserved spaces as linear.
	for i, rt := range reservedToks {
		if !manyOnlyLast(rt) {
			t.Errorf("the reserved space %s has a '>' before its last token", reservedSpaces[i].Pattern)
		}
	}
}
