package relay

import (
	"os"
	"strings"
	"testing"

	"github.com/apbridge/apbridge/bridge/jetstreamsink"
)

const goodConfig = `
instance: site-a
nats:
  servers: [nats://127.0.0.1:4222, nats://127.0.0.1:4223]
  lameDuckHandling: switch-to-passive
sources:
  - name: line1
    endpoints: [opc.tcp://127.0.0.1:4840, opc.tcp://127.0.0.1:4841]
    serviceLevelFailover: {enabled: true, degradedWindowSeconds: 10, minDwellSeconds: 60}
    tags:
      - {name: Line1.Temp, address: "ns=2;s=Line1.Temp"}
      - {name: Line1.SP, address: "ns=2;s=Line1.SP", writable: true}
`

func TestGoodConfig(t *testing.T) {
	c, err := Parse([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if c.Instance != "site-a" || len(c.Sources) != 1 || len(c.Sources[0].Tags) != 2 || c.handling().String() != "SWITCH_TO_PASSIVE" {
		t.Fatalf("config %+v", c)
	}
	if c.HTTPListen() != ":9464" {
		t.Fatalf("default http listen %q", c.HTTPListen())
	}
}

// Node IDs by namespace URI are valid wherever a node ID is: listed tags,
// groups and browse roots; each server resolves them against its own
// NamespaceArray at session start. The control: a malformed one is still
// refused, naming the field.
func TestNamespaceURINodeIDs(t *testing.T) {
	cfg := edit(`address: "ns=2;s=Line1.Temp"}`, `address: "nsu=urn:plant:line1;s=Temp"}`)
	cfg = strings.Replace(cfg, "    tags:\n", "    groups:\n      - {tags: [{name: G1, address: \"nsu=urn:plant:line1;i=42\"}]}\n"+
		"    browse: [{node: \"nsu=urn:plant:line1;s=Line1\"}]\n    tags:\n", 1)
	if _, err := Parse([]byte(cfg)); err != nil {
		t.Fatalf("nsu= node IDs refused: %v", err)
	}
	_, err := Parse([]byte(edit(`address: "ns=2;s=Line1.Temp"}`, `address: "nsu=urn:plant:line1;q=Temp"}`)))
	if err == nil || !strings.Contains(err.Error(), "sources[0].tags[0].address") {
		t.Fatalf("a malformed nsu= node ID: %v", err)
	}
}

// edit replaces old with new in the good config.
func edit(old, new string) string { return strings.Replace(goodConfig, old, new, 1) }

func TestBadConfigs(t *testing.T) {
	tests := []struct {
		name, cfg, want string
	}{
		{"unknown field", edit("instance: site-a", "instance: site-a\ncolour: blue"), "line 3: colour: unknown field (valid here: "},
		{"duration as a number", edit("instance: site-a", "instance: site-a\nsubscribe: {retryFloor: 5}"), "cannot unmarshal"},
		{"log level", edit("instance: site-a", "instance: site-a\nlogLevel: loud"), "logLevel: \"loud\" is not valid (valid: debug, info, warn, error)"},
		{"http listen", edit("instance: site-a", "instance: site-a\nhttp: {listen: nowhere}"), "http.listen"},
		{"no nats servers", edit("  servers: [nats://127.0.0.1:4222, nats://127.0.0.1:4223]", "  servers: []"), "nats.servers: at least one"},
		{"nats url scheme", edit("nats://127.0.0.1:4223", "http://127.0.0.1:4223"), "nats.servers[1]: \"http://127.0.0.1:4223\": scheme \"http\" is not valid (valid: nats, tls, ws, wss)"},
		{"nats url host", edit("nats://127.0.0.1:4223", "nats://:4223"), "nats.servers[1]"},
		{"ldm handling", edit("switch-to-passive", "sometimes"), "nats.lameDuckHandling: \"sometimes\" is not valid (valid: NONE, SWITCH_TO_PASSIVE, PASSIVE_ONLY)"},
		{"two auth methods", edit("  lameDuckHandling", "  token: abc\n  user: u\n  password: p\n  lameDuckHandling"), "alternatives"},
		{"user without password", edit("  lameDuckHandling", "  user: u\n  lameDuckHandling"), "user and password go together"},
		{"missing creds file", edit("  lameDuckHandling", "  credentials: /nonexistent/relay.creds\n  lameDuckHandling"), "nats.credentials"},
		{"tls cert without key", edit("  lameDuckHandling", "  tls: {cert: /etc/hosts}\n  lameDuckHandling"), "nats.tls: cert and key go together"},
		{"prefix", edit("instance: site-a", "instance: site-a\nservice: {prefix: 'a b'}"), "service.prefix"},
		{"subject template", edit("instance: site-a", "instance: site-a\nsubject: 'plant.*.{tag}'"), "subject: subject template"},
		{"subject placeholder", edit("instance: site-a", "instance: site-a\nsubject: 'plant.{line}'"), "unknown placeholder {line}"},
		{"guard ceiling below floor", edit("instance: site-a", "instance: site-a\nsubscribe: {retryFloor: 10s, retryCeiling: 5s}"), "subscribe.retryCeiling"},
		{"sink", edit("instance: site-a", "instance: site-a\nsink: kafka"), "sink: \"kafka\" is not a sink (valid: core, jetstream)"},
		{"tag deadband", edit(`address: "ns=2;s=Line1.Temp"}`, `address: "ns=2;s=Line1.Temp", filter: {deadbandType: percent, deadbandValue: 120}}`),
			"sources[0].tags[0].filter.deadbandValue: 120 is out of range (valid 0-100, percent of the node's EURange)"},
		{"tag queue", edit(`address: "ns=2;s=Line1.Temp"}`, `address: "ns=2;s=Line1.Temp", queueSize: 0}`),
			"sources[0].tags[0].queueSize: 0 is out of range (valid 1-65536)"},
		{"group trigger", edit("    tags:\n", "    groups:\n      - {name: fast, filter: {trigger: sometimes}, tags: [{name: G1, address: \"ns=2;s=G1\"}]}\n    tags:\n"),
			`sources[0].groups[0].filter.trigger: "sometimes" is not valid (valid: status, statusValue, statusValueTimestamp)`},
		{"group tag twice", edit("    tags:\n", "    groups:\n      - {tags: [{name: Line1.Temp, address: \"ns=2;s=X\"}]}\n    tags:\n"),
			`sources[0].groups[0].tags[0].name: tag "Line1.Temp" is listed twice`},
		{"empty group", edit("    tags:\n", "    groups:\n      - {name: empty, queueSize: 5}\n    tags:\n"),
			"sources[0].groups[0].tags: a group needs tags"},
		{"batch size", edit("    serviceLevelFailover", "    subscribeBatchSize: 0\n    serviceLevelFailover"),
			"sources[0].subscribeBatchSize: 0 is out of range (valid 1-10000)"},
		{"blip tolerance", edit("    serviceLevelFailover", "    blipToleranceMilliseconds: 3600001\n    serviceLevelFailover"),
			"sources[0].blipToleranceMilliseconds: 3600001 is out of range (valid 0-3600000)"},
		{"jetstream replicas", edit("instance: site-a", "instance: site-a\nsink: jetstream\njetstream: {replicas: 7}"), "jetstream.replicas"},
		{"jetstream window", edit("instance: site-a", "instance: site-a\nsink: jetstream\njetstream: {duplicateWindow: 10ms}"), "jetstream.duplicateWindow: 10ms is out of range (valid 100ms-24h)"},
		{"no sources", "nats: {servers: [nats://127.0.0.1:4222]}\n", "sources: at least one source"},
		{"source name", edit("  - name: line1", "  - name: ''"), "sources[0].name: required"},
		{"source type", edit("  - name: line1", "  - name: line1\n    type: modbus"), "sources[0].type: \"modbus\" is not valid (valid: opcua, mxgateway)"},
		{"one endpoint twice", edit("opc.tcp://127.0.0.1:4841", "opc.tcp://127.0.0.1:4840"), "sources[0].endpoints[1]"},
		// Two endpoints of one host and port are one server, however the
		// host is spelled and whatever the path.
		{"localhost and 127.0.0.1", edit("opc.tcp://127.0.0.1:4841", "opc.tcp://localhost:4840"),
			"sources[0].endpoints[1]: reaches the same server as endpoints[0]: same host and port (127.0.0.1 and localhost both name this machine; port 4840)"},
		{"::1 and 127.0.0.1", edit("opc.tcp://127.0.0.1:4841", "'opc.tcp://[::1]:4840'"),
			"sources[0].endpoints[1]: reaches the same server as endpoints[0]: same host and port (127.0.0.1 and ::1 both name this machine; port 4840)"},
		{"another 127 address", edit("opc.tcp://127.0.0.1:4841", "opc.tcp://127.0.1.2:4840"),
			"sources[0].endpoints[1]: reaches the same server as endpoints[0]: same host and port (127.0.0.1 and 127.0.1.2 both name this machine; port 4840)"},
		{"two paths on one host and port", edit("[opc.tcp://127.0.0.1:4840, opc.tcp://127.0.0.1:4841]", "[opc.tcp://plc-a:4840/UA/A, opc.tcp://plc-a:4840/UA/B]"),
			"sources[0].endpoints[1]: reaches the same server as endpoints[0]: same host and port (plc-a:4840; the path does not choose the server)"},
		{"endpoint scheme", edit("opc.tcp://127.0.0.1:4841", "http://127.0.0.1:4841"), "sources[0].endpoints[1]"},
		{"degraded window", edit("degradedWindowSeconds: 10", "degradedWindowSeconds: 0"), "sources[0].serviceLevelFailover.degradedWindowSeconds: 0 is out of range (valid 1-3600)"},
		{"dwell", edit("minDwellSeconds: 60", "minDwellSeconds: 100000"), "sources[0].serviceLevelFailover.minDwellSeconds: 100000 is out of range (valid 0-86400)"},
		{"mode", edit("    tags:", "    mode: lukewarm\n    tags:"), "sources[0].mode"},
		{"security policy", edit("    tags:", "    security: {policy: Basic512, mode: Sign}\n    tags:"), "sources[0].security.policy: \"Basic512\" is not valid"},
		{"security without cert", edit("    tags:", "    security: {policy: Basic256Sha256, mode: SignAndEncrypt}\n    tags:"), "certFile and keyFile are required"},
		{"policy without mode", edit("    tags:", "    security: {policy: Basic256Sha256, certFile: c.pem, keyFile: k.pem}\n    tags:"), "must both be None or both be set"},
		{"server certs count", edit("    tags:", "    security: {serverCerts: [a.der]}\n    tags:"), "serverCerts: 1 given, want one per endpoint (2)"},
		{"one server cert for a discovered pair", edit("[opc.tcp://127.0.0.1:4840, opc.tcp://127.0.0.1:4841]",
			"[opc.tcp://127.0.0.1:4840]\n    discoverPartner: true\n    security: {serverCerts: [a.der]}"),
			"sources[0].security.serverCerts: 1 given, want 2 with discoverPartner"},
		{"no tags", edit("    tags:\n      - {name: Line1.Temp, address: \"ns=2;s=Line1.Temp\"}\n      - {name: Line1.SP, address: \"ns=2;s=Line1.SP\", writable: true}\n", ""), "give tags, groups, browse roots, or a mix"},
		{"tag twice", edit("name: Line1.SP", "name: Line1.Temp"), "sources[0].tags[1].name: tag \"Line1.Temp\" is listed twice"},
		{"tag address", edit(`"ns=2;s=Line1.SP"`, `"Line1.SP"`), "sources[0].tags[1].address: \"Line1.SP\" is not a node ID"},
		{"tag subject", edit(`writable: true}`, `writable: true, subject: "a..b"}`), "sources[0].tags[1].subject"},
		{"browse node", edit("    tags:", "    browse: [{node: 'Line1'}]\n    tags:"), "sources[0].browse[0].node"},
		{"browse depth", edit("    tags:", "    browse: [{node: 'i=85', maxDepth: 500}]\n    tags:"), "sources[0].browse[0].maxDepth: 500 is out of range"},
		{"browse pattern", edit("    tags:", "    browse: [{node: 'i=85', include: ['Line[1']}]\n    tags:"),
			`sources[0].browse[0].include[0]: "Line[1" is not a glob pattern`},
		{"browse cap", edit("    tags:", "    browse: [{node: 'i=85', maxNodes: -1}]\n    tags:"),
			"sources[0].browse[0].maxNodes: -1 is out of range (valid 0-200000; 0 means 10000)"},
		{"two sources one name", goodConfig + "  - name: line1\n    endpoints: [opc.tcp://h:1]\n    tags: [{name: A, address: 'i=1'}]\n", "sources[1].name: \"line1\" is used by another source"},
		{"env var unset", edit("instance: site-a", "instance: ${APBRIDGE_TEST_UNSET_VAR}"), "line 2: environment variable APBRIDGE_TEST_UNSET_VAR is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.cfg))
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.cfg)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q\ndoes not contain %q", err, tt.want)
			}
		})
	}
}

// TestRedundantEndpointsAccepted is the other side of the bad configs'
// same-server cases: two endpoints that differ in host or port pass
// validate, loopback ones included (a pair of servers on one machine).
func TestRedundantEndpointsAccepted(t *testing.T) {
	for _, eps := range []string{
		"[opc.tcp://127.0.0.1:4840, opc.tcp://localhost:4841]",
		"[opc.tcp://plc-a:4840, opc.tcp://plc-b:4840]",
		"[opc.tcp://plc-a:4840/UA/A, opc.tcp://plc-a:4841/UA/A]",
		"['opc.tcp://[::1]:4840', opc.tcp://127.0.0.1:4841]",
	} {
		cfg := edit("[opc.tcp://127.0.0.1:4840, opc.tcp://127.0.0.1:4841]", eps)
		if !strings.Contains(cfg, eps) {
			t.Fatalf("the edit of %s did not apply", eps)
		}
		if _, err := Parse([]byte(cfg)); err != nil {
			t.Errorf("endpoints %s: %v", eps, err)
		}
	}
}

func TestSecretsFromEnvironment(t *testing.T) {
	t.Setenv("APBRIDGE_TEST_PASSWORD", "s3cret")
	cfg := edit("    tags:", "    security: {username: relay, password: '${APBRIDGE_TEST_PASSWORD}'}\n    tags:")
	c, err := Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if c.Sources[0].Security.Password != "s3cret" {
		t.Fatalf("password %q", c.Sources[0].Security.Password)
	}
	d, err := Parse([]byte(edit("instance: site-a", "instance: ${APBRIDGE_TEST_UNSET:-fallback}")))
	if err != nil || d.Instance != "fallback" {
		t.Fatalf("default: %v %v", d, err)
	}
}

// TestExampleConfig keeps examples/site.yaml true: it parses, and the only
// complaints are the files of a real site that this machine lacks.
func TestExampleConfig(t *testing.T) {
	t.Setenv("APBRIDGE_OPC_PASSWORD", "secret")
	t.Setenv("APBRIDGE_MXGW_TOKEN", "token")
	data, err := os.ReadFile("../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(data)
	for _, e := range Errors(err) {
		if !strings.Contains(e.Error(), "no such file") {
			t.Errorf("examples/site.yaml: %v", e)
		}
	}
}

// TestEdgeExampleConfig keeps examples/edge-site.yaml true: it parses
// without a complaint.
func TestEdgeExampleConfig(t *testing.T) {
	data, err := os.ReadFile("../examples/edge-site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatalf("examples/edge-site.yaml: %v", err)
	}
	if c.Edge == nil || c.JetStream.Domain != "site1" {
		t.Fatalf("examples/edge-site.yaml: edge %+v, domain %q", c.Edge, c.JetStream.Domain)
	}
}

func TestSinkConfig(t *testing.T) {
	if err := (SinkConfig{Sink: "kafka"}).Validate(); err == nil || !strings.Contains(err.Error(), "sink:") {
		t.Errorf("bad sink kind: %v", err)
	}
	if err := (SinkConfig{Sink: "jetstream", JetStream: jetstreamsink.Config{Replicas: 9}}).Validate(); err == nil {
		t.Error("bad jetstream settings accepted")
	}
}

// TestTagMonitoring: a tag's own settings win over its group's, which win
// over the source's (applied by the Pair).
func TestTagMonitoring(t *testing.T) {
	c, err := Parse([]byte(edit("    tags:\n", `    queueSize: 4
    groups:
      - name: analog
        samplingIntervalMilliseconds: 500
        filter: {deadbandType: absolute, deadbandValue: 0.5}
        tags:
          - {name: Flow, address: "ns=2;s=Flow"}
          - {name: Level, address: "ns=2;s=Level", queueSize: 10, filter: {trigger: statusValueTimestamp}}
    tags:
`)))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]tagEntry{}
	for _, e := range c.Sources[0].listedTags("sources[0]") {
		byName[e.tag.Name] = e
	}
	if len(byName) != 4 {
		t.Fatalf("%d tags, want 4", len(byName))
	}
	flow, level := byName["Flow"].mon, byName["Level"].mon
	if *flow.SamplingIntervalMilliseconds != 500 || flow.QueueSize != nil || flow.Filter.DeadbandValue != 0.5 {
		t.Errorf("Flow: %+v", flow)
	}
	if *level.SamplingIntervalMilliseconds != 500 || *level.QueueSize != 10 || level.Filter.Trigger != "statusValueTimestamp" ||
		level.Filter.DeadbandType != "" {
		t.Errorf("Level: %+v (the tag's filter replaces the group's whole)", level)
	}
	if !byName["Line1.Temp"].mon.IsZero() || *c.Sources[0].QueueSize != 4 {
		t.Errorf("a listed tag without overrides: %+v", byName["Line1.Temp"].mon)
	}
}
