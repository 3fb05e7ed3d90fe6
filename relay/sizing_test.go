package relay

import (
	"strings"
	"testing"
)

// TestSizingWarnings: a configured queueSize too small for the takeover
// window at its tags' sampling interval warns, naming the field, the tag,
// the window and the size needed; an unset queueSize (the relay sizes it)
// and one large enough do not. Warnings never fail Validate.
func TestSizingWarnings(t *testing.T) {
	const base = `
nats:
  servers: [nats://127.0.0.1:4222]
%FLEET%
sources:
  - name: line1
    endpoints: [opc.tcp://127.0.0.1:4840]
%SOURCE%
    groups:
      - name: fast
%GROUP%
        tags:
          - {name: G1, address: "ns=2;s=G1"%G1%}
          - {name: G2, address: "ns=2;s=G2"}
    tags:
      - {name: T1, address: "ns=2;s=T1"%T1%}
`
	for _, tc := range []struct {
		name                     string
		fleet, source, group, g1 string
		t1                       string
		// want are the warnings, each as substrings joined by " && ";
		// nil: none.
		want []string
	}{
		{name: "defaults: nothing to warn about"},
		{name: "a source queue of 1 (the old default)", source: "    queueSize: 1",
			want: []string{`sources[0].queueSize: 1 holds 0s of values at the 100ms sampling interval of tag "T1" (3 tag(s) of source "line1"); ` +
				`a takeover of 10s (a restart of the relay) needs 102 or more`}},
		{name: "a source queue large enough", source: "    queueSize: 102"},
		{name: "one short of enough", source: "    queueSize: 101", want: []string{"sources[0].queueSize: 101 holds 9.9s && needs 102 or more"}},
		{name: "a tag of its own", t1: ", queueSize: 10",
			want: []string{`sources[0].tags[0].queueSize: 10 holds 800ms of values at the 100ms sampling interval of tag "T1"`}},
		{name: "a group's queue, its fastest tag named", group: "        queueSize: 200", g1: ", samplingIntervalMilliseconds: 20",
			want: []string{`sources[0].groups[0].queueSize: 200 holds 3.88s of values at the 20ms sampling interval of tag "G1" (1 tag(s) && needs 506 or more`}},
		{name: "a faster tag under the source's queue", source: "    queueSize: 102", t1: ", samplingIntervalMilliseconds: 50",
			want: []string{`sources[0].queueSize: 102 holds 4.95s of values at the 50ms sampling interval of tag "T1" (1 tag(s) && needs 203 or more`}},
		{name: "a fleet's long lease", fleet: "fleet: {relayId: r1, leaseTTL: 30s}", source: "    queueSize: 102",
			want: []string{"a takeover of 31s (the fleet's takeover, leaseTTL + 1s) needs 312 or more"}},
		{name: "a fleet's short lease: a restart still counts", fleet: "fleet: {relayId: r1, leaseTTL: 3s}", source: "    queueSize: 102"},
		{name: "the source's own window", source: "    queueSize: 102\n    takeoverWindowMilliseconds: 2000"},
		{name: "the source's own window, longer", source: "    queueSize: 102\n    takeoverWindowMilliseconds: 20000",
			want: []string{"a takeover of 20s (takeoverWindowMilliseconds) needs 202 or more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.NewReplacer("%FLEET%", tc.fleet, "%SOURCE%", tc.source, "%GROUP%", tc.group,
				"%G1%", tc.g1, "%T1%", tc.t1).Replace(base)
			c, err := Parse([]byte(cfg))
			if err != nil {
				t.Fatalf("config refused: %v\n%s", err, cfg)
			}
			got := c.Warnings()
			if len(got) != len(tc.want) {
				t.Fatalf("%d warnings, want %d: %q", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				for _, part := range strings.Split(w, " && ") {
					if !strings.Contains(got[i], part) {
						t.Fatalf("warning %q\nwant it to contain %q", got[i], part)
					}
				}
			}
		})
	}
}

// TestFleetPairConfig: a fleet relay's OPC UA source runs with the lease's
// takeover window when the source sets none, and with its own otherwise.
func TestFleetPairConfig(t *testing.T) {
	sc := SourceConfig{Name: "s"}
	if pc := pairConfig(nil, sc); pc.TakeoverWindowMilliseconds != nil {
		t.Fatalf("a relay alone: window %d set, want the default", *pc.TakeoverWindowMilliseconds)
	}
	fc := &FleetConfig{LeaseTTL: 30e9}
	if pc := pairConfig(fc, sc); pc.TakeoverWindowMilliseconds == nil || *pc.TakeoverWindowMilliseconds != 31000 {
		t.Fatalf("fleet, leaseTTL 30s: window %v, want 31000", pc.TakeoverWindowMilliseconds)
	}
	own := 5000
	sc.TakeoverWindowMilliseconds = &own
	if pc := pairConfig(fc, sc); *pc.TakeoverWindowMilliseconds != 5000 {
		t.Fatalf("the source's own window replaced: %d", *pc.TakeoverWindowMilliseconds)
	}
	if sc.TakeoverWindowMilliseconds != &own {
		t.Fatal("pairConfig changed the config")
	}
}
