package wire

import (
	"reflect"
	"testing"
)

func TestServiceSubjects(t *testing.T) {
	want := []string{"p.q.status", "p.q.snapshot", "p.q.write.>", "p.q.events.>", "p.q.config.>", "$SRV.>"}
	if got := ServiceSubjects("p.q"); !reflect.DeepEqual(got, want) {
		t.Fatalf("ServiceSubjects = %q, want %q", got, want)
	}
	svc := NewPatterns(ServiceSubjects("p.q")...)
	for _, s := range []string{
		StatusSubject("p.q"), SnapshotSubject("p.q"), WriteSubject("p.q", "plant.l1.T"),
		EventSubject("p.q", "line 1"), ConfigSubject("p.q", "apply"), "$SRV.PING.apbridge", "$SRV.INFO",
	} {
		if err := ValidateSubject(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
		if _, ok := svc.Covering(s); !ok {
			t.Errorf("%q is a service subject, but not among ServiceSubjects", s)
		}
	}
	if got := EventSubject("p", "line 1.a"); got != "p.events.line%201%2Ea" {
		t.Errorf("EventSubject = %q: want the source as one escaped token", got)
	}
}

func TestDefaultsAreValid(t *testing.T) {
	if err := ValidateSubject(DefaultPrefix); err != nil {
		t.Error(err)
	}
	m, err := NewMapper(DefaultSubject)
	if err != nil {
		t.Fatal(err)
	}
	// The default tag subjects stay clear of the default service
	// subjects, unless a source is named like an endpoint ("write").
	for _, sv := range ServiceSubjects(DefaultPrefix) {
		if m.CanOverlap("line1", sv) {
			t.Errorf("a tag of source line1 can get a subject under %q", sv)
		}
	}
	if !m.CanOverlap("write", WriteSubject(DefaultPrefix, ">")) {
		t.Error("a source named write can give tags write subjects, but CanOverlap says no")
	}
}
