package wire_test

import (
	"testing"
	"time"

	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// sinkMsg keeps the last message so that the compiler cannot drop the work.
var sinkMsg *nats.Msg

// BenchmarkUpdateMessage is the relay's per-update encoding: the JSON
// payload and the headers of one update, as the bridge hands them to its
// sink.
func BenchmarkUpdateMessage(b *testing.B) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	u := wire.Update{Tag: "Counter0042", Value: int64(123456), Status: wire.StatusGood, SourceTime: now, ServerTime: now.Add(time.Millisecond), Seq: 98765}
	b.ReportAllocs()
	for b.Loop() {
		m, err := updateMessage("apbridge.line1.Counter0042", &u)
		if err != nil {
			b.Fatal(err)
		}
		sinkMsg = m
	}
}

// updateMessage is what the bridge does per update (bridge/runner.go).
func updateMessage(subject string, u *wire.Update) (*nats.Msg, error) {
	typ, _ := wire.TypeOf(u.Value)
	return wire.EncodeMsg(subject, u, typ, 250, true, false), nil
}

// BenchmarkUpdateMessageTo is BenchmarkUpdateMessage into one MsgBuf, as
// the bridge encodes for the core sink: only the payload is new.
func BenchmarkUpdateMessageTo(b *testing.B) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	u := wire.Update{Tag: "Counter0042", Value: int64(123456), Status: wire.StatusGood, SourceTime: now, ServerTime: now.Add(time.Millisecond), Seq: 98765}
	var buf wire.MsgBuf
	b.ReportAllocs()
	for b.Loop() {
		typ, _ := wire.TypeOf(u.Value)
		sinkMsg = wire.EncodeMsgTo(&buf, "apbridge.line1.Counter0042", &u, typ, 250, true, false)
	}
}
