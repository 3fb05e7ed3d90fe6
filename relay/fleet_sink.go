package relay

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// fencedSink is the last check before an update leaves a fleet relay: the
// lease must be valid, and its fencing token goes with the update.
type fencedSink struct {
	inner bridge.Sink
	// valid is the lease check (fleetPart.valid); fenced counts the
	// updates it stopped.
	valid  func(source string) (uint64, bool)
	fenced *atomic.Uint64
	// relay and leases are the header values: the relay's ID, and per
	// source its lease's token (a *leaseHeader), made once per token
	// rather than per update. Nil relay: no headers (noHeaders). A
	// value is shared by the messages of its token: header values are
	// replaced (Set), never written in place.
	relay  []string
	leases sync.Map
}

// leaseHeader is a source's lease token and its header value.
type leaseHeader struct {
	token uint64
	value []string
}

func newFencedSink(inner bridge.Sink, f *fleetPart, noHeaders bool) *fencedSink {
	s := &fencedSink{inner: inner, valid: f.valid, fenced: &f.fenced}
	if !noHeaders {
		s.relay = []string{f.id}
	}
	return s
}

func (s *fencedSink) Publish(source string, m *nats.Msg, u *wire.Update) error {
	token, ok := s.valid(source)
	if !ok {
		s.fenced.Add(1)
		return errFenced
	}
	if s.relay != nil {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header[wire.HeaderLease] = s.leaseValue(source, token)
		m.Header[wire.HeaderRelay] = s.relay
	}
	return s.inner.Publish(source, m, u)
}

// leaseValue is the lease header's value for source's token.
func (s *fencedSink) leaseValue(source string, token uint64) []string {
	if v, ok := s.leases.Load(source); ok {
		if lh := v.(*leaseHeader); lh.token == token {
			return lh.value
		}
	}
	lh := &leaseHeader{token: token, value: []string{strconv.FormatUint(token, 10)}}
	s.leases.Store(source, lh)
	return lh.value
}

func (s *fencedSink) Flush(ctx context.Context) error { return s.inner.Flush(ctx) }

func (s *fencedSink) Bind(ctx context.Context, subj bridge.Subjects) error {
	if b, ok := s.inner.(bridge.Binder); ok {
		return b.Bind(ctx, subj)
	}
	return nil
}

func (s *fencedSink) Abort() {
	if a, ok := s.inner.(bridge.Aborter); ok {
		a.Abort()
	}
}

func (s *fencedSink) SinkStatus() any {
	if r, ok := s.inner.(bridge.StatusReporter); ok {
		return r.SinkStatus()
	}
	return nil
}
