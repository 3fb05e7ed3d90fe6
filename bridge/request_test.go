package bridge_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/wire"
)

// The service requests that are wrong in a way encoding/json lets pass,
// each refused with a 400 that names the problem, and nothing written.

// refusal is a request and the error reply it must get.
type refusal struct {
	name, body, code, want string
}

// expectRefused sends each request to subject and checks the micro error
// code, the JSON error body and that the error names the problem.
func expectRefused(t *testing.T, e *env, subject string, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		m := testutil.Request(t, e.nc, subject, c.body)
		var body struct {
			Error string `json:"error"`
		}
		code := m.Header.Get("Nats-Service-Error-Code")
		if code != c.code || json.Unmarshal(m.Data, &body) != nil || !strings.Contains(body.Error, c.want) ||
			!strings.Contains(m.Header.Get("Nats-Service-Error"), c.want) {
			t.Errorf("%s: %.200s answered %s %.300s (%.300s); want %s naming %.200q", c.name, c.body, code, m.Data, m.Header.Get("Nats-Service-Error"), c.code, c.want)
		}
	}
}

// writableEnv is a bridge of one writable tag, SP1, whose last value is
// an Int64, and the tag's write subject.
func writableEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := setup(t, bridge.Config{}, []bridge.TagConfig{{Name: "SP1", Address: "ns=1;s=SP1", Writable: true}})
	testutil.WaitFor(t, "tag subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 1 })
	e.src.EmitAll()
	testutil.WaitFor(t, "published", 5*time.Second, func() bool { return e.b.Stats()[0].Published == 1 })
	ws, _ := e.b.WriteSubject("sim1", "SP1")
	return e, ws
}

// TestWriteRefusesDuplicateKeys: encoding/json keeps the last of two keys,
// so {"value":"x","value":5} wrote 5. A key twice, in any case, is a 400
// that names it, and the source receives nothing.
func TestWriteRefusesDuplicateKeys(t *testing.T) {
	e, ws := writableEnv(t)
	expectRefused(t, e, ws, []refusal{
		{"value twice", `{"value":"x","value":5}`, "400", `duplicate key "value"`},
		{"value in two cases", `{"value":5,"Value":6}`, "400", `duplicate key "Value": the same as "value"`},
		{"type twice", `{"type":"Int64","value":5,"type":"String"}`, "400", `duplicate key "type"`},
		{"inside the value", `{"value":[{"a":1,"a":2}],"type":"Int64[]"}`, "400", `duplicate key "a" in "value[0]"`},
	})
	if w := e.src.Writes(); len(w) != 0 {
		t.Fatalf("refused requests wrote %+v", w)
	}
	// Positive control: the same request with the key once is written.
	m := testutil.Request(t, e.nc, ws, `{"value":5}`)
	if w := e.src.Writes(); m.Header.Get("Nats-Service-Error-Code") != "" || len(w) != 1 || w[0].Value != int64(5) {
		t.Fatalf("write of 5 answered %s; the source has %+v", m.Data, w)
	}
}

// TestSnapshotRefusesDuplicateKeys: {"limit":1,"limit":600} was a page of
// 500; a key twice is a 400 that names it.
func TestSnapshotRefusesDuplicateKeys(t *testing.T) {
	e, _ := writableEnv(t)
	expectRefused(t, e, wire.SnapshotSubject(wire.DefaultPrefix), []refusal{
		{"limit twice", `{"limit":1,"limit":600}`, "400", `snapshot request: duplicate key "limit"`},
		{"source in two cases", `{"source":"sim1","Source":"other"}`, "400", `duplicate key "Source": the same as "source"`},
	})
	m := testutil.Request(t, e.nc, wire.SnapshotSubject(wire.DefaultPrefix), `{"limit":1}`)
	if m.Header.Get("Nats-Service-Error-Code") != "" || !strings.Contains(string(m.Data), `"tag":"SP1"`) {
		t.Fatalf("positive control: snapshot answered %v %s", m.Header, m.Data)
	}
}

// TestWriteRefusesContradictingType: a request's "type" overrode the type
// the tag was known to have, and only a strict server stopped the write; a
// lenient one (the simulated source takes anything) converted or stored
// it. A type other than the last value's is a 400 naming both, and the
// source receives nothing.
func TestWriteRefusesContradictingType(t *testing.T) {
	e, ws := writableEnv(t) // SP1's last value is an Int64
	expectRefused(t, e, ws, []refusal{
		{"String for Int64", `{"value":"abc","type":"String"}`, "400", `"type" "String" contradicts the tag's type Int64 (the type of its last value): leave "type" out, or give Int64`},
		{"Double for Int64", `{"value":5,"type":"Double"}`, "400", `"type" "Double" contradicts the tag's type Int64`},
		{"array for scalar", `{"value":["5"],"type":"Int64[]"}`, "400", `"type" "Int64[]" contradicts the tag's type Int64`},
		{"no such type", `{"value":5,"type":"Int65"}`, "400", `"type" "Int65" contradicts the tag's type Int64`},
	})
	if w := e.src.Writes(); len(w) != 0 {
		t.Fatalf("refused requests wrote %+v", w)
	}
	// Positive controls: the tag's own type, given or not.
	for _, body := range []string{`{"value":"6","type":"Int64"}`, `{"value":7}`} {
		if m := testutil.Request(t, e.nc, ws, body); m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("write %s answered %v %s", body, m.Header, m.Data)
		}
	}
	if w := e.src.Writes(); len(w) != 2 || w[0].Value != int64(6) || w[1].Value != int64(7) {
		t.Fatalf("writes at the source: %+v", w)
	}
}

// TestWriteTypeOfATagWithoutValue: before a tag has a value its type is
// not known, and the request's "type" is what the relay has to go by.
func TestWriteTypeOfATagWithoutValue(t *testing.T) {
	e := setup(t, bridge.Config{}, []bridge.TagConfig{{Name: "SP1", Address: "ns=1;s=SP1", Writable: true}})
	testutil.WaitFor(t, "tag subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 1 })
	ws, _ := e.b.WriteSubject("sim1", "SP1")
	expectRefused(t, e, ws, []refusal{{"no type", `{"value":"abc"}`, "400", `its type is not known yet: give "type" in the request`}})
	if m := testutil.Request(t, e.nc, ws, `{"value":"abc","type":"String"}`); m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("typed write answered %v %s", m.Header, m.Data)
	}
	if w := e.src.Writes(); len(w) != 1 || w[0].Value != "abc" {
		t.Fatalf("writes at the source: %+v", w)
	}
}

// TestSnapshotRefusesWhatReadsAsNoTags: a garbage cursor and a wildcard
// prefix answered {"updates":[]}, which reads as "no tags", and a limit
// above the page size was capped quietly although the error text gives
// the range. Each is a 400 that names the problem.
func TestSnapshotRefusesWhatReadsAsNoTags(t *testing.T) {
	e := setup(t, bridge.Config{}, tagsN(3, false))
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 3 })
	e.src.EmitAll()
	testutil.WaitFor(t, "published", 5*time.Second, func() bool { return e.b.Stats()[0].Published == 3 })
	first, _ := e.b.Subject("sim1", "Line1.TA")
	snap := wire.SnapshotSubject(wire.DefaultPrefix)
	expectRefused(t, e, snap, []refusal{
		{"limit above the page", `{"limit":501}`, "400", "limit: 501 is out of range (valid 0-500; 0 means 500)"},
		{"negative limit", `{"limit":-1}`, "400", "limit: -1 is out of range (valid 0-500; 0 means 500)"},
		{"garbage cursor", `{"after":"garbage"}`, "400", `after: "garbage" is not the subject of a tag of this relay: give the "next" of the previous reply`},
		{"cursor of a tag without its prefix", `{"after":"` + first + `","prefix":"apbridge.sim1.Line1.TB"}`, "400", `after: "` + first + `" does not start with the prefix "apbridge.sim1.Line1.TB"`},
		{"star", `{"prefix":"apbridge.sim1.*"}`, "400", `prefix: "apbridge.sim1.*" has the wildcard '*' at byte 14: a prefix is matched literally`},
		{"full wildcard", `{"prefix":"apbridge.>"}`, "400", `prefix: "apbridge.>" has the wildcard '>' at byte 9`},
		{"star inside a token", `{"prefix":"apbridge.sim*"}`, "400", `has the wildcard '*'`},
		{"space", `{"prefix":"apbridge. sim1"}`, "400", `has whitespace or a control character at byte 9`},
		{"empty token", `{"prefix":"apbridge..sim1"}`, "400", `prefix: "apbridge..sim1" has an empty token`},
		// The error quotes the client's string cut short, so that it fits
		// in a reply whatever the request's size.
		{"huge prefix", `{"prefix":"` + strings.Repeat("x", 900<<10) + `*"}`, "400", `prefix: "` + strings.Repeat("x", 64) + `…" has the wildcard '*' at byte 921600`},
		{"huge source", `{"source":"` + strings.Repeat("s", 900<<10) + `"}`, "404", `source: "` + strings.Repeat("s", 64) + `…" is not a source of this relay (valid: sim1)`},
	})
	// Positive controls: the page size, a real cursor, a real prefix, and
	// a prefix that selects nothing, which is an honest empty page.
	for _, c := range []struct {
		body  string
		count int
	}{
		{`{"limit":500}`, 3},
		{`{"after":"` + first + `"}`, 2},
		{`{"prefix":"apbridge.sim1.Line1.T","after":"` + first + `"}`, 2},
		{`{"prefix":"apbridge.sim1.Line1.TB"}`, 1},
		{`{"prefix":"nothing."}`, 0},
	} {
		m := testutil.Request(t, e.nc, snap, c.body)
		var rep wire.SnapshotReply
		if m.Header.Get("Nats-Service-Error-Code") != "" || json.Unmarshal(m.Data, &rep) != nil || len(rep.Updates) != c.count {
			t.Errorf("snapshot %s answered %v %s; want %d updates", c.body, m.Header, m.Data, c.count)
		}
	}
}

// TestRequestErrorsFitInAReply: an error quotes what the client sent cut
// short. encoding/json quotes an unknown field whole, and the error reply
// to a 900 KiB key was too large to send: the client waited for its
// timeout instead of a 400.
func TestRequestErrorsFitInAReply(t *testing.T) {
	e, ws := writableEnv(t)
	key := strings.Repeat("k", 900<<10)
	expectRefused(t, e, ws, []refusal{
		{"huge unknown field", `{"value":1,"` + key + `":2}`, "400", `malformed write request: json: unknown field "kkkk`},
		{"huge key twice", `{"` + key[:450<<10] + `":1,"` + key[:450<<10] + `":2}`, "400", `duplicate key "` + strings.Repeat("k", 64) + `…"`},
		{"huge type", `{"value":1,"type":"` + key + `"}`, "400", `"type" "` + strings.Repeat("k", 64) + `…" contradicts the tag's type Int64`},
	})
	expectRefused(t, e, wire.SnapshotSubject(wire.DefaultPrefix), []refusal{
		{"huge unknown field", `{"` + key + `":1}`, "400", `snapshot request: json: unknown field "kkkk`},
		{"huge cursor", `{"after":"` + key + `"}`, "400", `after: "` + strings.Repeat("k", 64) + `…" is not the subject of a tag`},
	})
	if w := e.src.Writes(); len(w) != 0 {
		t.Fatalf("refused requests wrote %+v", w)
	}
}
