package relay_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/apbridge/apbridge/relay"
)

const diffBase = `
nats: {servers: ["nats://127.0.0.1:4222"]}
http: {listen: ""}
sources:
  - name: line1
    endpoints: ["opc.tcp://a:4840", "opc.tcp://b:4840"]
    tags:
      - {name: T1, address: "ns=2;s=T1"}
      - {name: T2, address: "ns=2;s=T2", samplingIntervalMilliseconds: 100}
    groups:
      - samplingIntervalMilliseconds: 500
        tags:
          - {name: G1, address: "ns=2;s=G1"}
  - name: gw
    type: mxgateway
    endpoints: ["gw-a:5001"]
    tags:
      - {name: P1, address: Pump_001.PV}
`

func mustParse(t *testing.T, y string) *relay.Config {
	t.Helper()
	c, err := relay.Parse([]byte(y))
	if err != nil {
		t.Fatalf("config does not parse: %v\n%s", err, y)
	}
	return c
}

// TestDiff: each kind of change gives its plan, and restart-only fields
// are named, each, as refusals.
func TestDiff(t *testing.T) {
	r := strings.NewReplacer
	for _, tc := range []struct {
		name string
		edit *strings.Replacer
		want string // the plan as JSON
	}{
		{"nothing", r(), `{}`},
		{"tag added", r(`- {name: T1,`, `- {name: T0, address: "ns=2;s=T0"}
      - {name: T1,`),
			`{"tags":[{"source":"line1","add":["T0"]}]}`},
		{"tag removed", r(`      - {name: T1, address: "ns=2;s=T1"}
`, ``),
			`{"tags":[{"source":"line1","remove":["T1"]}]}`},
		{"address", r(`"ns=2;s=T1"`, `"ns=2;s=T1b"`),
			`{"tags":[{"source":"line1","change":[{"tag":"T1","fields":["address"]}]}]}`},
		{"tag monitoring", r(`samplingIntervalMilliseconds: 100`, `samplingIntervalMilliseconds: 200`),
			`{"tags":[{"source":"line1","change":[{"tag":"T2","fields":["monitoring"]}]}]}`},
		{"group monitoring reaches its tags", r(`samplingIntervalMilliseconds: 500`, `samplingIntervalMilliseconds: 250`),
			`{"tags":[{"source":"line1","change":[{"tag":"G1","fields":["monitoring"]}]}]}`},
		{"subject and writable", r(`{name: T1, address: "ns=2;s=T1"}`, `{name: T1, address: "ns=2;s=T1", subject: plant.t1, writable: true}`),
			`{"tags":[{"source":"line1","change":[{"tag":"T1","fields":["subject","writable"]}]}]}`},
		{"moved into a group with the same monitoring: no change", r(`      - {name: T2, address: "ns=2;s=T2", samplingIntervalMilliseconds: 100}
`, ``, `          - {name: G1, address: "ns=2;s=G1"}`, `          - {name: G1, address: "ns=2;s=G1"}
      - samplingIntervalMilliseconds: 100
        tags:
          - {name: T2, address: "ns=2;s=T2"}`),
			`{}`},
		{"gateway tag", r(`{name: P1, address: Pump_001.PV}`, `{name: P1, address: Pump_001.PV}
      - {name: P2, address: Pump_002.PV}`),
			`{"tags":[{"source":"gw","add":["P2"]}]}`},
		{"source endpoints", r(`"opc.tcp://b:4840"`, `"opc.tcp://c:4840"`), `{"replaceSources":["line1"]}`},
		{"source added", r(`  - name: gw
`, `  - name: line2
    endpoints: ["opc.tcp://c:4840"]
    tags: [{name: X, address: "ns=2;s=X"}]
  - name: gw
`), `{"addSources":["line2"]}`},
		{"source removed", r(`  - name: gw
    type: mxgateway
    endpoints: ["gw-a:5001"]
    tags:
      - {name: P1, address: Pump_001.PV}
`, ``), `{"removeSources":["gw"]}`},
		{"restart-only fields, each named", r(`nats: {servers: ["nats://127.0.0.1:4222"]}`,
			`nats: {servers: ["nats://127.0.0.1:4223"]}
service: {prefix: other}
sink: jetstream
jetstream: {stream: PLANT}
fleet: {relayId: r1}`, `"ns=2;s=T1"`, `"ns=2;s=T1b"`),
			`{"restart":["nats.servers: changed; a restart applies it","service.prefix: changed; a restart applies it",` +
				`"sink: changed; a restart applies it","jetstream: changed; a restart applies it","fleet: changed; a restart applies it"],` +
				`"tags":[{"source":"line1","change":[{"tag":"T1","fields":["address"]}]}]}`},
		{"browse sources change by a restart", r(`    groups:`, `    browse: [{node: "i=85"}]
    groups:`),
			`{"restart":["sources[0] (line1): a source with browse roots changes by a restart (its browsed tags are found at start)"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := mustParse(t, diffBase)
			next := mustParse(t, tc.edit.Replace(diffBase))
			p := relay.Diff(cur, next)
			got, _ := json.Marshal(p)
			if string(got) != tc.want {
				t.Fatalf("plan\n got %s\nwant %s", got, tc.want)
			}
			if (p.Err() != nil) != strings.Contains(tc.want, `"restart"`) {
				t.Fatalf("Err() = %v", p.Err())
			}
			if p.Empty() != (tc.want == `{}`) {
				t.Fatalf("Empty() = %v", p.Empty())
			}
		})
	}
}

// TestDiffSummary: the one line the audit log carries.
func TestDiffSummary(t *testing.T) {
	p := &relay.Plan{AddSources: []string{"a"}, Tags: []relay.SourceTagPlan{
		{Source: "s", Add: []string{"x", "y"}, Remove: []string{"z"}, Change: []relay.TagChange{{Tag: "w", Fields: []string{"address"}}}}}}
	if got, want := p.Summary(), "sources +1 -0 ~0, tags +2 -1 ~1"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
}
