package mxsim

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// The Gateway's faults and lifecycle: event queue overflow, a graceful
// end of the streams, a kill and a restart.

func TestMxEventOverflowNoReader(t *testing.T) {
	data := NewData()
	data.Define("Tank.Level", float64(0))
	g := startMx(t, data, 1)[0]
	g.SetEventQueueSize(4)
	c := dialMx(t, g.Addr())
	s := openMx(t, c, 0, 0)
	s.handle(true, "Tank.Level") // the initial value: 1 queued
	for i := 1; i <= 3; i++ {
		data.Set("Tank.Level", float64(i), QualityGood)
	}
	if st := g.Stats(); st.Faults != 0 || st.Sessions != 1 {
		t.Fatalf("with the queue just full: %+v", st)
	}
	data.Set("Tank.Level", 4.0, QualityGood) // one too many
	if st := g.Stats(); st.Faults != 1 || st.Sessions != 0 || st.Advised != 0 {
		t.Fatalf("after the overflow: %+v", st)
	}
	_, err := s.invoke(pingCmd())
	wantCode(t, "Invoke on a faulted session", err, codes.NotFound)
	st, err := c.StreamEvents(ctx5s(t), &mxpb.StreamEventsRequest{SessionId: s.id})
	if err == nil {
		_, err = st.Recv()
	}
	wantCode(t, "events of a faulted session", err, codes.NotFound)
}

// A subscriber that stops reading fills the transport's windows, then the
// queue: the session faults, and a reader that comes back gets what was
// in flight, the SessionFault, then RESOURCE_EXHAUSTED.
func TestMxEventOverflowStalledReader(t *testing.T) {
	data := NewData()
	data.Define("Tank.Log", "")
	g := startMx(t, data, 1)[0]
	g.SetEventQueueSize(16)
	// Fixed 64 KiB windows (no BDP growth) keep what the transport
	// absorbs small.
	c := dialMx(t, g.Addr(), grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	s := openMx(t, c, 0, 0)
	s.handle(true, "Tank.Log")
	ctx, cancel := context.WithCancel(ctx5s(t))
	defer cancel()
	st, err := c.StreamEvents(ctx, &mxpb.StreamEventsRequest{SessionId: s.id})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := st.Recv(); err != nil || ev.GetOnDataChange() == nil {
		t.Fatalf("initial value: %v %v", ev, err)
	}
	// 16 KiB values at a pace the stream keeps up with until the windows
	// are full: then the gateway's sender is stuck in Send, as on a real
	// gateway, and the queue fills behind it.
	big := strings.Repeat("x", 16<<10)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for i := 0; g.Stats().Faults == 0; i++ {
		if i > 10_000 {
			t.Fatal("10000 changes and no overflow")
		}
		data.Set("Tank.Log", big, QualityGood)
		<-tick.C
	}
	var fault *mxpb.SessionFault
	last, n := uint64(1), 0
	for {
		ev, err := st.Recv()
		if err != nil {
			wantCode(t, "the faulted stream", err, codes.ResourceExhausted)
			break
		}
		n++
		if fault != nil {
			t.Fatalf("an event after the fault: %v", ev)
		}
		if f := ev.GetFault(); f != nil {
			fault = f
			if ev.GetWorkerSequence() <= last {
				t.Fatalf("fault sequence %d after %d", ev.GetWorkerSequence(), last)
			}
			continue
		}
		if ev.GetWorkerSequence() != last+1 {
			t.Fatalf("sequence %d after %d before the fault", ev.GetWorkerSequence(), last)
		}
		last = ev.GetWorkerSequence()
	}
	if fault.GetKind() != mxpb.SessionFaultKind_SESSION_FAULT_KIND_EVENT_QUEUE_OVERFLOW {
		t.Fatalf("fault %v, want an event queue overflow", fault)
	}
	t.Logf("%d events in flight when the queue of 16 overflowed", n-1)
	if st := g.Stats(); st.Faults != 1 || st.Sessions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMxEndStreams(t *testing.T) {
	data := NewData()
	data.Define("Tank.Level", float64(0))
	g := startMx(t, data, 1)[0]
	c := dialMx(t, g.Addr())
	s := openMx(t, c, 0, 0)
	h := s.handle(true, "Tank.Level")
	ev := s.events()
	ev.next(t, 5*time.Second) // the initial value
	idle := openMx(t, c, 0, 0)
	data.Set("Tank.Level", 9.0, QualityGood)

	g.EndStreams()
	evs, err := ev.end(t, 5*time.Second)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("the stream ended with %v, want io.EOF", err)
	}
	// What was queued before the end is delivered.
	if len(evs) == 0 || evs[len(evs)-1].GetOnDataChange().GetItemHandle() != h ||
		evs[len(evs)-1].GetOnDataChange().GetValue().GetDoubleValue() != 9 {
		t.Fatalf("events at the end: %v", evs)
	}
	for _, x := range []*mxSess{s, idle} {
		_, err := x.invoke(pingCmd())
		wantCode(t, "Invoke after EndStreams", err, codes.NotFound)
	}
	if st := g.Stats(); st.Sessions != 0 {
		t.Fatalf("%d sessions after EndStreams", st.Sessions)
	}
	openMx(t, c, 0, 0).must(pingCmd()) // the gateway is still up
}

func TestMxKillRestart(t *testing.T) {
	data := NewData()
	data.Define("Tank.Level", float64(0))
	g := startMx(t, data, 1)[0]
	c := dialMx(t, g.Addr())
	s := openMx(t, c, 0, 0)
	s.handle(true, "Tank.Level")
	ev := s.events()
	ev.next(t, 5*time.Second)

	// A worker wedged in a command does not hold the kill up.
	started := make(chan string, 1)
	g.OnCommand(func(_, kind string) { started <- kind })
	g.SetCommandLatency(time.Hour)
	wedged := make(chan error, 1)
	go func() { _, err := s.invoke(pingCmd()); wedged <- err }()
	<-started
	g.OnCommand(nil)
	addr := g.Addr()
	g.Kill()
	if g.Running() {
		t.Fatal("running after Kill")
	}
	if _, err := ev.end(t, 5*time.Second); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("the stream of a killed gateway ended with %v", err)
	}
	wantCode(t, "the stream of a killed gateway", ev.err, codes.Unavailable)
	wantCode(t, "a command running at the kill", <-wedged, codes.Unavailable)
	_, err := s.invoke(pingCmd())
	wantCode(t, "Invoke on a dead gateway", err, codes.Unavailable)
	g.Kill() // a second kill does nothing

	g.SetCommandLatency(0)
	if err := g.Restart(); err != nil {
		t.Fatal(err)
	}
	if g.Addr() != addr || !g.Running() {
		t.Fatalf("restarted on %s (running %v), was %s", g.Addr(), g.Running(), addr)
	}
	// The same client reconnects; the old session is gone.
	ctx := ctx5s(t)
	_, err = s.c.Invoke(ctx, &mxpb.MxCommandRequest{SessionId: s.id, Command: pingCmd()}, grpc.WaitForReady(true))
	wantCode(t, "the old session after a restart", err, codes.NotFound)
	fresh := openMx(t, c, 0, 0)
	if h := fresh.handle(true, "Tank.Level"); h <= 0 {
		t.Fatal(h)
	}
	if st := g.Stats(); st.Sessions != 1 || st.Advised != 1 {
		t.Fatalf("stats after the restart: %+v", st)
	}

	g.Close()
	g.Close()
	if err := g.Restart(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Restart after Close: %v", err)
	}
}
