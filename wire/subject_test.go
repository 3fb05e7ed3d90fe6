package wire

import (
	"strings"
	"testing"
)

func TestMapper(t *testing.T) {
	tests := []struct {
		tmpl, source, tag, addr, want string
	}{
		{"plant.{source}.{tag}", "opc1", "Line1.Temp", "ns=1;s=T", "plant.opc1.Line1.Temp"},
		{"plant.{source}.{tag}", "opc1", "Line 1/Temp*", "", "plant.opc1.Line%201.Temp%2A"},
		{"plant.{tagid}", "s", "Line1.Temp", "", "plant.Line1%2ETemp"},
		{"raw.{address}", "s", "T", "ns=1;s=Counter0001", "raw.ns=1;s=Counter0001"},
		{"raw.{address}", "s", "T", "ns=2;s=A.B>C", "raw.ns=2;s=A%2EB%3EC"},
		{"x.{tag}", "s", "Ünïcode", "", "x.%C3%9Cn%C3%AFcode"},
		{"x.{source}-{tag}", "s", "T", "", "x.s-T"},
	}
	for _, tt := range tests {
		m, err := NewMapper(tt.tmpl)
		if err != nil {
			t.Fatalf("NewMapper(%q): %v", tt.tmpl, err)
		}
		got, err := m.Subject(tt.source, tt.tag, tt.addr)
		if err != nil {
			t.Fatalf("%q/%q: %v", tt.tmpl, tt.tag, err)
		}
		if got != tt.want {
			t.Errorf("%q with %q = %q, want %q", tt.tmpl, tt.tag, got, tt.want)
		}
		if err := ValidateSubject(got); err != nil {
			t.Errorf("%q: %v", got, err)
		}
	}
}

func TestMapperRejects(t *testing.T) {
	for _, tmpl := range []string{"", "a..{tag}", "a.*.{tag}", "a.>", "{tag}.", "a b.{tag}", "a.{nope}", "a.{tag", ".{tag}"} {
		if _, err := NewMapper(tmpl); err == nil {
			t.Errorf("NewMapper(%q) accepted a bad template", tmpl)
		}
	}
	m, _ := NewMapper("p.{tag}")
	for _, tag := range []string{"", "...", "//"} {
		_, err := m.Subject("s", tag, "")
		if err == nil || !strings.Contains(err.Error(), "tag") {
			t.Errorf("tag %q: err = %v, want one naming the tag", tag, err)
		}
	}
	m, _ = NewMapper("p.{address}")
	if _, err := m.Subject("s", "T", ""); err == nil || !strings.Contains(err.Error(), `"T"`) {
		t.Errorf("missing address: %v", err)
	}
}

func TestValidateSubject(t *testing.T) {
	if err := ValidateSubject("a.b-c"); err != nil {
		t.Error(err)
	}
	for _, s := range []string{"", "a..b", "a.*", "a.>", ">", "a b", "a.\x00"} {
		if err := ValidateSubject(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestValidatePattern(t *testing.T) {
	for _, s := range []string{"a.b", "a.*", "a.>", "a.*.c", ">", "*"} {
		if err := ValidatePattern(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", "a..b", "a.>.c", "a b", "a.\tb", "a.b*", "a.>b.c", "a.\x7f"} {
		if err := ValidatePattern(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}
