package wire

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestHeaders(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	h := nats.Header{}
	SetHeaders(h, &Update{Tag: "T", Value: 1.5, Status: StatusUncertain, SourceTime: ts, Seq: 9})
	want := map[string]string{HeaderQuality: "Uncertain", HeaderStatus: "0x40000000",
		HeaderSeq: "9", HeaderSourceTime: "2026-01-02T03:04:05.000000006Z"}
	for k, v := range want {
		if h.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, h.Get(k), v)
		}
	}
	if h.Get(HeaderServerTime) != "" {
		t.Error("zero server time set")
	}
}

func BenchmarkSetHeaders(b *testing.B) {
	u := Update{Tag: "Plant.Line1.Temperature", Value: 21.53, Status: StatusGood,
		SourceTime: time.Now(), ServerTime: time.Now(), Seq: 123456}
	b.ReportAllocs()
	for b.Loop() {
		SetHeaders(make(nats.Header, 6), &u)
	}
}
