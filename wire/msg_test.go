package wire_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// EncodeMsg builds the message AppendJSON and SetHeaders describe, byte for
// byte and header for header, whatever fields the update has.
func TestEncodeMsgIsAppendJSONAndSetHeaders(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	for _, u := range []wire.Update{
		{Tag: "T", Value: int64(-5), Status: wire.StatusGood, SourceTime: now, ServerTime: now.Add(time.Second), Seq: 1},
		{Tag: "Ünïcode \"q\"", Value: "a\nb", Status: 0x80340000, Seq: 18446744073709551615},
		{Tag: "T", Value: 1.5, Status: 0x40000000, ServerTime: now},
		{Tag: "T", Value: []int32{1, 2}, SourceTime: now},
		{Tag: "T", Value: nil, Seq: 0},
		wire.Unsupported("T", struct{}{}, now, time.Time{}),
	} {
		typ, ok := wire.TypeOf(u.Value)
		if !ok {
			t.Fatalf("%T: no type", u.Value)
		}
		want, err := wire.AppendJSON(nil, &u)
		if err != nil {
			t.Fatal(err)
		}
		for _, headers := range []bool{false, true} {
			for _, refresh := range []bool{false, true} {
				m := wire.EncodeMsg("s.T", &u, typ, 8, headers, refresh)
				if m.Subject != "s.T" || string(m.Data) != string(want) {
					t.Errorf("%+v: subject %q data %s, want s.T %s", u, m.Subject, m.Data, want)
				}
				wantH := nats.Header{}
				if headers {
					wire.SetHeaders(wantH, &u)
					if refresh {
						wantH[wire.HeaderRefresh] = []string{"true"}
					}
				}
				if !headers && m.Header != nil || !maps.EqualFunc(m.Header, wantH, slices.Equal) {
					t.Errorf("%+v (headers %v, refresh %v): headers %v, want %v", u, headers, refresh, m.Header, wantH)
				}
			}
		}
	}
}

// A sink that appends to the payload or adds headers leaves the update's
// headers as they were: the headers share the payload's bytes and one
// array of values. Neither has room to grow into, so an append copies:
// two appends to the same message never write into each other, and a
// value added to one header never lands in another's.
func TestEncodeMsgHeadersSurviveAppend(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	u := wire.Update{Tag: "T", Value: true, Status: wire.StatusGood, SourceTime: now, ServerTime: now, Seq: 7}
	m := wire.EncodeMsg("s.T", &u, wire.TypeBoolean, 512, true, true)
	before := maps.Clone(m.Header)
	for k, v := range before {
		before[k] = slices.Clone(v)
	}
	payload := string(m.Data)
	a := append(m.Data, 'A')
	b := append(m.Data, 'B')
	if a[len(a)-1] != 'A' || b[len(b)-1] != 'B' || string(m.Data) != payload {
		t.Errorf("two appends to the payload wrote into each other: %q, %q", a, b)
	}
	m.Data = append(m.Data, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"...)
	m.Header["Nats-Msg-Id"] = []string{"id"}
	m.Header["Nats-Expected-Stream"] = []string{"s"}
	m.Header[wire.HeaderLease] = []string{"1"}
	for k := range before {
		m.Header.Add(k, "added")
	}
	for k, v := range before {
		if got := m.Header[k]; !slices.Equal(got[:len(got)-1], v) {
			t.Errorf("%s: %q after the appends, %q before", k, got, v)
		}
	}
	if m.Header.Get(wire.HeaderSeq) != "7" || m.Header.Get(wire.HeaderSourceTime) != "2026-05-01T12:00:00Z" {
		t.Errorf("headers %v", m.Header)
	}
}

// EncodeMsgTo gives the message EncodeMsg gives, update after update into
// one MsgBuf: with and without headers and the refresh header, so that
// nothing of an update is left in the next one's message.
func TestEncodeMsgToIsEncodeMsg(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	var b wire.MsgBuf
	steps := []struct {
		u                wire.Update
		headers, refresh bool
	}{
		{wire.Update{Tag: "T", Value: int64(1), Status: wire.StatusGood, SourceTime: now, ServerTime: now, Seq: 1}, true, true},
		{wire.Update{Tag: "T", Value: "two", Status: wire.StatusGood, ServerTime: now, Seq: 2}, true, false},
		{wire.Update{Tag: "T", Value: 3.5, Status: wire.StatusGood, Seq: 3}, false, false},
		{wire.Update{Tag: "T", Value: int64(4), Status: wire.StatusGood, SourceTime: now, Seq: 4}, true, false},
	}
	for i, s := range steps {
		typ, _ := wire.TypeOf(s.u.Value)
		want := wire.EncodeMsg("a.T", &s.u, typ, 16, s.headers, s.refresh)
		got := wire.EncodeMsgTo(&b, "a.T", &s.u, typ, 16, s.headers, s.refresh)
		if got.Subject != want.Subject || got.Reply != "" || string(got.Data) != string(want.Data) {
			t.Fatalf("update %d: %q %q, want %q %q", i, got.Subject, got.Data, want.Subject, want.Data)
		}
		if !maps.EqualFunc(got.Header, want.Header, slices.Equal) || (got.Header == nil) != (want.Header == nil) {
			t.Fatalf("update %d: headers %v, want %v", i, got.Header, want.Header)
		}
	}
}
