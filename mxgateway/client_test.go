package mxgateway_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/mxgateway"
	"github.com/apbridge/apbridge/testcluster/mxsim"
)

// gateway starts a simulator with one item and returns it and a client.
func gateway(t *testing.T) (*mxsim.Gateway, *mxgateway.Client) {
	t.Helper()
	data := mxsim.NewData()
	data.Define("Pump_001.PV", int32(7))
	g, err := mxsim.Start(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	c, err := mxgateway.NewClient(g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return g, c
}

func open(t *testing.T, c *mxgateway.Client, so mxgateway.SessionOptions) *mxgateway.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Open(ctx, so)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpenKeepsWhatTheGatewaySaid(t *testing.T) {
	g, c := gateway(t)
	s := open(t, c, mxgateway.SessionOptions{CommandTimeout: 90 * time.Second})
	if s.CommandTimeout() != 90*time.Second || !s.Has(mxgateway.CapBulkSubscribeSupervisory) || !s.Supervisory() || s.HeartbeatInterval() <= 0 {
		t.Fatalf("session: timeout %v caps %v supervisory %v heartbeat %v", s.CommandTimeout(), s.Capabilities(), s.Supervisory(), s.HeartbeatInterval())
	}
	// Without a request the gateway's default comes back.
	if d := open(t, c, mxgateway.SessionOptions{}).CommandTimeout(); d != mxsim.DefaultCommandTimeout {
		t.Fatalf("default command timeout %v", d)
	}
	_ = g
}

// SubscribeBulk never sends supervisory=true to a gateway without the
// capability: it would advise plainly and break writes.
func TestSupervisoryBulkNeedsTheCapability(t *testing.T) {
	g, c := gateway(t)
	g.SetCapabilities([]string{"unary-invoke"})
	s := open(t, c, mxgateway.SessionOptions{})
	ctx := context.Background()
	if _, err := s.SubscribeBulk(ctx, []string{"Pump_001.PV"}, true); !errors.Is(err, mxgateway.ErrNoCapability) {
		t.Fatalf("err %v, want ErrNoCapability", err)
	}
	if n := g.Stats().CommandsByKind["SubscribeBulk"]; n != 0 {
		t.Fatalf("the gateway got %d SubscribeBulk", n)
	}
	// Positive control: the per-item path works, and so do writes.
	res, err := s.AddItems(ctx, []string{"Pump_001.PV", "Nope_1.PV"})
	if err != nil {
		t.Fatal(err)
	}
	var se *mxgateway.StatusError
	if res[0].Err != nil || !errors.As(res[1].Err, &se) || !strings.Contains(res[1].Err.Error(), "Nope_1.PV") {
		t.Fatalf("results %+v", res)
	}
	if err := s.AdviseSupervisory(ctx, res[0].Handle); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, res[0].Handle, int32(9)); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, res[0].Handle, "nine"); err == nil || !strings.Contains(err.Error(), "wrong type") {
		t.Fatalf("write of a string to an int32 item: %v", err)
	}
	// A plain advise on a supervisory session: the gateway refuses the
	// write, and says so.
	other := open(t, c, mxgateway.SessionOptions{})
	res, err = other.AddItems(ctx, []string{"Pump_001.PV"})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Advise(ctx, res[0].Handle); err != nil {
		t.Fatal(err)
	}
	if err := other.Write(ctx, res[0].Handle, int32(3)); !errors.As(err, &se) || !strings.Contains(err.Error(), "write refused") {
		t.Fatalf("write after a plain advise on a supervisory session: %v", err)
	}
	if _, err := mxgateway.ToValue(struct{}{}); err == nil {
		t.Fatal("a struct became a value")
	}
}

func TestCommandErrors(t *testing.T) {
	g, c := gateway(t)
	s := open(t, c, mxgateway.SessionOptions{CommandTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	g.SetCommandLatency(time.Second)
	if err := s.Ping(ctx); !errors.Is(err, mxgateway.ErrCommandTimeout) {
		t.Fatalf("a command past the session's timeout: %v", err)
	}
	g.SetCommandLatency(0)
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	g.Kill()
	if err := s.Ping(ctx); !errors.Is(err, mxgateway.ErrDisconnected) {
		t.Fatalf("a command to a killed gateway: %v", err)
	}
	if err := g.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the session reported lost", 5*time.Second, func() bool {
		return errors.Is(s.Ping(ctx), mxgateway.ErrSessionLost)
	})
}

// How a stream ended decides what the caller does: each end has its own
// error.
func TestStreamEnds(t *testing.T) {
	g, c := gateway(t)
	run := func(s *mxgateway.Session, h mxgateway.EventHandler) chan error {
		done := make(chan error, 1)
		go func() { done <- s.Events(context.Background(), h) }()
		return done
	}
	wait := func(done chan error) error {
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the stream did not end")
		}
		return nil
	}

	// In order.
	g.SetHeartbeatInterval(20 * time.Millisecond)
	s := open(t, c, mxgateway.SessionOptions{})
	var alive sync.Once
	streaming := make(chan struct{})
	done := run(s, mxgateway.EventHandler{Alive: func(uint64) { alive.Do(func() { close(streaming) }) }})
	<-streaming
	g.EndStreams()
	if err := wait(done); !errors.Is(err, mxgateway.ErrSessionEnded) {
		t.Fatalf("graceful end: %v", err)
	}

	// A second subscriber is refused; the first goes on.
	s = open(t, c, mxgateway.SessionOptions{})
	var mu sync.Mutex
	var got []mxgateway.DataChange
	done = run(s, mxgateway.EventHandler{Data: func(d mxgateway.DataChange) { mu.Lock(); got = append(got, d); mu.Unlock() }})
	if _, err := s.SubscribeBulk(context.Background(), []string{"Pump_001.PV"}, true); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the first value", 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 })
	if err := s.Events(context.Background(), mxgateway.EventHandler{}); err == nil {
		t.Fatal("a second subscriber was accepted")
	}
	mu.Lock()
	if v := got[0]; v.Value != int32(7) || v.Quality != mxgateway.QualityGood || v.Timestamp.IsZero() || v.Seq == 0 {
		t.Fatalf("first value %+v", v)
	}
	mu.Unlock()

	// Broken.
	g.Kill()
	if err := wait(done); !errors.Is(err, mxgateway.ErrDisconnected) {
		t.Fatalf("killed gateway: %v", err)
	}
}

// An event queue overflow faults the session, and the stream says so.
func TestOverflowFault(t *testing.T) {
	g, c := gateway(t)
	g.SetEventQueueSize(50)
	s := open(t, c, mxgateway.SessionOptions{})
	if _, err := s.SubscribeBulk(context.Background(), []string{"Pump_001.PV"}, true); err != nil {
		t.Fatal(err)
	}
	release, first := make(chan struct{}), make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- s.Events(context.Background(), mxgateway.EventHandler{Data: func(mxgateway.DataChange) {
			once.Do(func() { close(first); <-release }) // a consumer that stops reading
		}})
	}()
	<-first
	for i := 0; g.Stats().Faults == 0; i++ {
		if i > 200000 {
			t.Fatal("no overflow")
		}
		g.Data().Set("Pump_001.PV", int32(i), mxgateway.QualityGood)
	}
	close(release)
	var fe *mxgateway.FaultError
	select {
	case err := <-done:
		if !errors.As(err, &fe) || !fe.Overflow() {
			t.Fatalf("stream end %v, want an overflow fault", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
}

func TestNotAGateway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	c, err := mxgateway.NewClient(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Open(ctx, mxgateway.SessionOptions{}); err == nil || !strings.Contains(err.Error(), "does not speak the MxAccess gateway protocol") {
		t.Fatalf("open on an HTTP/1 server: %v", err)
	}
	if _, err := mxgateway.NewClient(ln.Addr().String(), mxgateway.WithToken("secret")); err == nil {
		t.Fatal("a token over plaintext was accepted")
	}
	tc, err := mxgateway.NewClient(ln.Addr().String(), mxgateway.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12}), mxgateway.WithToken("secret"))
	if err != nil {
		t.Fatal(err)
	}
	tc.Close()
}

// A stream that breaks while events flow loses the ones in transit; the
// gateway keeps the session and EventsAfter gets them again: the worker
// sequence goes on without a gap. Resuming after events the gateway no
// longer holds is refused.
func TestEventsResumeAfterABreak(t *testing.T) {
	g, c := gateway(t)
	stop := g.Data().RunCounters("Fast_", 20, time.Millisecond)
	defer stop()
	s := open(t, c, mxgateway.SessionOptions{})
	if !s.Has(mxgateway.CapEventResume) {
		t.Fatal("the simulator does not advertise event-resume")
	}
	addrs := make([]string, 20)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("Fast_%d.Value", i)
	}
	if _, err := s.SubscribeBulk(context.Background(), addrs, true); err != nil {
		t.Fatal(err)
	}
	var last uint64
	gaps := 0
	h := mxgateway.EventHandler{
		Alive: func(seq uint64) { last = seq },
		Gap:   func(want, got uint64) { gaps++ },
	}
	// Read a while, then break the stream under traffic.
	ctx, cancel := context.WithCancel(context.Background())
	h1 := h
	h1.Alive = func(seq uint64) {
		last = seq
		if seq >= 2000 {
			cancel()
		}
	}
	if err := s.Events(ctx, h1); !errors.Is(err, context.Canceled) {
		t.Fatalf("first stream: %v", err)
	}
	broke := last
	ctx2, cancel2 := context.WithCancel(context.Background())
	h2 := h
	first := uint64(0)
	h2.Alive = func(seq uint64) {
		if first == 0 {
			first = seq
		}
		last = seq
		// Past what the gateway holds, so that resuming after the
		// first events must be refused below.
		if seq >= broke+mxsim.ReplaySize+1000 {
			cancel2()
		}
	}
	if err := s.EventsAfter(ctx2, broke, h2); !errors.Is(err, context.Canceled) {
		t.Fatalf("resumed stream: %v", err)
	}
	if first != broke+1 || gaps != 0 {
		t.Fatalf("resumed after %d at %d with %d gaps, want %d and none", broke, first, gaps, broke+1)
	}
	// Long gone: refused, not a silent gap.
	ctx3, cancel3 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel3()
	if err := s.EventsAfter(ctx3, 1, mxgateway.EventHandler{}); !errors.Is(err, mxgateway.ErrCannotResume) {
		t.Fatalf("resume after an event no longer held: %v", err)
	}
}
