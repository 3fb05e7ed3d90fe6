package relay

import (
	"context"
	"errors"
	"testing"

	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// lastSink keeps the last message published.
type lastSink struct{ m *nats.Msg }

func (s *lastSink) Publish(_ string, m *nats.Msg, _ *wire.Update) error { s.m = m; return nil }
func (s *lastSink) Flush(context.Context) error                         { return nil }

// TestFencedSinkHeaders: an update leaves with its source's lease token
// and the relay's ID, the token's value made once per token (no
// allocation per update) and a new one when the token changes; an update
// without a valid lease is stopped and counted; without headers nothing
// is added.
func TestFencedSinkHeaders(t *testing.T) {
	token, valid := uint64(7), true
	f := &fleetPart{id: "r1"}
	inner := &lastSink{}
	s := newFencedSink(inner, f, false)
	s.valid = func(string) (uint64, bool) { return token, valid }

	m := &nats.Msg{Subject: "a", Header: nats.Header{}}
	if err := s.Publish("line1", m, nil); err != nil {
		t.Fatal(err)
	}
	if got := inner.m.Header.Get(wire.HeaderLease); got != "7" || inner.m.Header.Get(wire.HeaderRelay) != "r1" {
		t.Fatalf("headers %v", inner.m.Header)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.Publish("line1", m, nil) }); n != 0 {
		t.Errorf("%v allocations per update of an unchanged token", n)
	}
	token = 8
	if err := s.Publish("line1", m, nil); err != nil || inner.m.Header.Get(wire.HeaderLease) != "8" {
		t.Fatalf("after a new lease: %v, headers %v", err, inner.m.Header)
	}
	if err := s.Publish("line2", &nats.Msg{Subject: "b"}, nil); err != nil || inner.m.Header.Get(wire.HeaderLease) != "8" {
		t.Fatalf("another source: %v, headers %v", err, inner.m.Header)
	}
	valid = false
	if err := s.Publish("line1", m, nil); !errors.Is(err, errFenced) || f.fenced.Load() != 1 {
		t.Fatalf("without a valid lease: %v, %d fenced", err, f.fenced.Load())
	}

	valid = true
	bare := newFencedSink(inner, f, true)
	bare.valid = s.valid
	if err := bare.Publish("line1", &nats.Msg{Subject: "c"}, nil); err != nil || inner.m.Header != nil {
		t.Fatalf("noHeaders: %v, headers %v", err, inner.m.Header)
	}
}
