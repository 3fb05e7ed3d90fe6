package bridge

import "testing"

func TestSubjectsOverlap(t *testing.T) {
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
	}
	for _, tt := range tests {
		if got := SubjectsOverlap(tt.a, tt.b); got != tt.want {
			t.Errorf("SubjectsOverlap(%q, %q) = %v", tt.a, tt.b, got)
		}
		if got := SubjectsOverlap(tt.b, tt.a); got != tt.want {
			t.Errorf("SubjectsOverlap(%q, %q) = %v", tt.b, tt.a, got)
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
