package ldm

import (
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    LameDuckHandling
		wantErr bool
	}{
		{"NONE", None, false},
		{"SWITCH_TO_PASSIVE", SwitchToPassive, false},
		{"PASSIVE_ONLY", PassiveOnly, false},
		{"switch-to-passive", SwitchToPassive, false},
		{" passive_only ", PassiveOnly, false},
		{"none", None, false},
		{"", None, true},
		{"SWITCH", None, true},
		{"ACTIVE_ONLY", None, true},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if (err != nil) != tt.wantErr {
			t.Fatalf("Parse(%q) err = %v, wantErr %v", tt.in, err, tt.wantErr)
		}
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) error %T is not *ParseError", tt.in, err)
			}
			for _, v := range Values() {
				if !strings.Contains(err.Error(), v.String()) {
					t.Errorf("error %q does not list valid value %s", err, v)
				}
			}
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestStringRoundTrip(t *testing.T) {
	for _, v := range Values() {
		got, err := Parse(v.String())
		if err != nil || got != v {
			t.Errorf("Parse(%s.String()) = %v, %v", v, got, err)
		}
	}
	if s := LameDuckHandling(7).String(); s != "LameDuckHandling(7)" {
		t.Errorf("invalid value String() = %q", s)
	}
	if _, err := LameDuckHandling(-1).MarshalText(); err == nil {
		t.Error("MarshalText of an invalid value succeeded")
	}
}

func TestJSONAndYAML(t *testing.T) {
	type cfg struct {
		Handling LameDuckHandling `json:"lameDuckHandling" yaml:"lameDuckHandling"`
	}
	b, err := json.Marshal(cfg{PassiveOnly})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"lameDuckHandling":"PASSIVE_ONLY"}` {
		t.Fatalf("json = %s", b)
	}
	var c cfg
	if err := json.Unmarshal([]byte(`{"lameDuckHandling":"switch-to-passive"}`), &c); err != nil || c.Handling != SwitchToPassive {
		t.Fatalf("json unmarshal = %v, %v", c.Handling, err)
	}
	if err := json.Unmarshal([]byte(`{"lameDuckHandling":"bogus"}`), &c); err == nil || !strings.Contains(err.Error(), "PASSIVE_ONLY") {
		t.Fatalf("json unmarshal of a bad name: %v", err)
	}
	var y cfg
	if err := yaml.Unmarshal([]byte("lameDuckHandling: NONE\n"), &y); err != nil || y.Handling != None {
		t.Fatalf("yaml = %v, %v", y.Handling, err)
	}
	out, err := yaml.Marshal(cfg{SwitchToPassive})
	if err != nil || strings.TrimSpace(string(out)) != "lameDuckHandling: SWITCH_TO_PASSIVE" {
		t.Fatalf("yaml marshal = %q, %v", out, err)
	}
}

func TestFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	h := Default
	fs.Var(&h, "ldm", "lame-duck handling")
	if err := fs.Parse([]string{"-ldm", "passive-only"}); err != nil || h != PassiveOnly {
		t.Fatalf("flag = %v, %v", h, err)
	}
	fs.SetOutput(new(strings.Builder))
	if err := fs.Parse([]string{"-ldm", "nope"}); err == nil {
		t.Fatal("bad flag value accepted")
	}
}

func TestActs(t *testing.T) {
	tests := []struct {
		h               LameDuckHandling
		active, passive bool
	}{
		{None, false, false},
		{SwitchToPassive, true, true},
		{PassiveOnly, false, true},
	}
	for _, tt := range tests {
		if tt.h.ActsOnActive() != tt.active || tt.h.ActsOnPassive() != tt.passive {
			t.Errorf("%s: ActsOnActive=%v ActsOnPassive=%v", tt.h, tt.h.ActsOnActive(), tt.h.ActsOnPassive())
		}
	}
}
