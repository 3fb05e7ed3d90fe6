package mxgateway

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
)

// DataChange is an advised item's new value.
type DataChange struct {
	Handle    int32
	Value     any
	Quality   int32
	Timestamp time.Time
	// Seq is the session's worker sequence of the event.
	Seq uint64
}

// EventHandler receives a session's events, on the goroutine that runs
// Events, in the gateway's order.
type EventHandler struct {
	// Data receives data changes.
	Data func(DataChange)
	// Alive is called for every event, heartbeats included, with its
	// worker sequence, so that the caller can tell a silent stream from a
	// dead one and knows where to resume.
	Alive func(seq uint64)
	// Gap reports a jump in the worker sequence: events were lost.
	Gap func(expected, got uint64)
	// Done is called for every event after Data, with its worker
	// sequence: the event has been handled.
	Done func(seq uint64)
}

// Events streams the session's events to h until the stream ends, and
// returns why: ErrSessionEnded (ended in order), a *FaultError (the
// gateway faulted the session), ErrSessionLost, ErrDisconnected, or ctx's
// error. One stream per session: the gateway refuses a second.
func (s *Session) Events(ctx context.Context, h EventHandler) error {
	return s.EventsAfter(ctx, 0, h)
}

// EventsAfter is Events resuming after worker sequence after, on a
// session whose stream broke: a gateway with CapEventResume sends again
// what the client did not receive. It returns ErrCannotResume when the
// gateway no longer holds those events, and at once, without asking, when
// it does not advertise CapEventResume (resume_after is apbridge's: a
// gateway without it would start a new stream and so skip events
// silently).
func (s *Session) EventsAfter(ctx context.Context, after uint64, h EventHandler) error {
	if after > 0 && !s.Has(CapEventResume) {
		return fmt.Errorf("%w: %w %q", ErrCannotResume, ErrNoCapability, CapEventResume)
	}
	st, err := s.c.api.StreamEvents(ctx, &mxpb.StreamEventsRequest{SessionId: s.id, ResumeAfter: after})
	if err != nil {
		return rpcErr(ctx, "stream events", err)
	}
	var fault *FaultError
	next := after + 1
	if after == 0 {
		next = 0
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			return streamErr(ctx, err, fault)
		}
		if seq := ev.GetWorkerSequence(); seq != 0 {
			if next != 0 && seq != next && h.Gap != nil {
				h.Gap(next, seq)
			}
			next = seq + 1
		}
		if h.Alive != nil {
			h.Alive(ev.GetWorkerSequence())
		}
		switch e := ev.GetEvent().(type) {
		case *mxpb.MxEvent_OnDataChange:
			if h.Data != nil {
				d := e.OnDataChange
				h.Data(DataChange{Handle: d.GetItemHandle(), Value: FromValue(d.GetValue()), Quality: d.GetQuality(),
					Timestamp: asTime(d.GetTimestamp()), Seq: ev.GetWorkerSequence()})
			}
		case *mxpb.MxEvent_Fault:
			fault = &FaultError{Kind: e.Fault.GetKind(), Message: e.Fault.GetMessage()}
		}
		if h.Done != nil {
			h.Done(ev.GetWorkerSequence())
		}
	}
}

// String describes the session for logs.
func (s *Session) String() string {
	return fmt.Sprintf("session %s on %s", s.id, s.gateway)
}
