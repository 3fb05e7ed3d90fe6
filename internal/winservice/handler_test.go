package winservice

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeManager drives Execute as the service control manager would:
// requests in, statuses out.
type fakeManager struct {
	reqs    chan Cmd
	reports chan Status
	done    chan struct{}
	code    uint32
	err     error
}

// relayFake is a relay that becomes ready when told and drains when its
// context ends.
type relayFake struct {
	ready    chan struct{} // closed by the test: the relay is ready
	fail     chan error    // an error to end with while running
	stopped  atomic.Bool   // its context ended: the drain began
	reloads  atomic.Int32
	drainErr error
}

func (f *relayFake) relay() Relay {
	return Relay{
		Run: func(ctx context.Context, ready func()) error {
			select {
			case <-f.ready:
				ready()
			case <-ctx.Done():
				f.stopped.Store(true)
				return nil // stopped while starting
			}
			select {
			case <-ctx.Done():
				f.stopped.Store(true)
				return f.drainErr
			case err := <-f.fail:
				return err
			}
		},
		Reload: func() { f.reloads.Add(1) },
	}
}

func startFake(t *testing.T, f *relayFake, checkPoint time.Duration) *fakeManager {
	t.Helper()
	m := &fakeManager{reqs: make(chan Cmd), reports: make(chan Status, 64), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.code, m.err = Execute(context.Background(), f.relay(), Timing{Start: time.Minute, Stop: 30 * time.Second, CheckPoint: checkPoint},
			m.reqs, func(c Cmd) Cmd { return c }, func(s Status) { m.reports <- s })
	}()
	t.Cleanup(func() {
		select {
		case <-m.done:
		case <-time.After(10 * time.Second):
			t.Error("Execute did not return")
		}
	})
	return m
}

func (m *fakeManager) next(t *testing.T) Status {
	t.Helper()
	select {
	case s := <-m.reports:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no status reported")
		return Status{}
	}
}

// nextState skips checkpoint reports of the pending state.
func (m *fakeManager) nextState(t *testing.T, skip State) Status {
	t.Helper()
	for {
		if s := m.next(t); s.State != skip {
			return s
		}
	}
}

func newRelayFake() *relayFake {
	return &relayFake{ready: make(chan struct{}), fail: make(chan error, 1)}
}

// Start pending until ready, Running accepting stop, shutdown and
// parameter change, Interrogate answered, ParamChange reloads, Stop:
// StopPending with the drain's wait hint, the relay's context cancelled,
// exit code 0.
func TestExecuteLifecycle(t *testing.T) {
	f := newRelayFake()
	m := startFake(t, f, time.Hour)
	if s := m.next(t); s.State != StateStartPending || s.WaitHint != time.Minute || s.Accepts != 0 {
		t.Fatalf("first status %+v, want StartPending with a 1m hint accepting nothing", s)
	}
	close(f.ready)
	if s := m.next(t); s.State != StateRunning || s.Accepts != AcceptStop|AcceptShutdown|AcceptParamChange {
		t.Fatalf("after ready: %+v", s)
	}
	m.reqs <- CmdInterrogate
	if s := m.next(t); s.State != StateRunning {
		t.Errorf("interrogate answered %+v", s)
	}
	m.reqs <- CmdParamChange
	m.reqs <- CmdOther // ignored
	m.reqs <- CmdInterrogate
	m.next(t)
	if n := f.reloads.Load(); n != 1 {
		t.Errorf("%d reloads after one parameter change", n)
	}
	if f.stopped.Load() {
		t.Fatal("the relay stopped without a stop request")
	}
	m.reqs <- CmdStop
	if s := m.next(t); s.State != StateStopPending || s.WaitHint != 30*time.Second || s.Accepts != 0 {
		t.Fatalf("after stop: %+v", s)
	}
	<-m.done
	if !f.stopped.Load() || m.code != 0 || m.err != nil {
		t.Fatalf("stopped %v, exit code %d, err %v", f.stopped.Load(), m.code, m.err)
	}
}

// A pending state reports a rising checkpoint, so that the manager waits
// on.
func TestExecuteCheckPoints(t *testing.T) {
	f := newRelayFake()
	m := startFake(t, f, time.Millisecond)
	var last uint32
	for i := 0; i < 3; i++ {
		s := m.next(t)
		if s.State != StateStartPending || (i > 0 && s.CheckPoint <= last) {
			t.Fatalf("report %d: %+v after checkpoint %d", i, s, last)
		}
		last = s.CheckPoint
	}
	close(f.ready)
	if s := m.nextState(t, StateStartPending); s.State != StateRunning || s.CheckPoint != 0 {
		t.Fatalf("running: %+v", s)
	}
	m.reqs <- CmdShutdown // a shutdown stops as a stop does
	if s := m.next(t); s.State != StateStopPending {
		t.Fatalf("after shutdown: %+v", s)
	}
	<-m.done
	if !f.stopped.Load() || m.code != 0 {
		t.Fatalf("stopped %v, code %d", f.stopped.Load(), m.code)
	}
}

// A stop while the start is pending stops the start; a parameter change
// then does nothing.
func TestExecuteStopWhileStarting(t *testing.T) {
	f := newRelayFake()
	m := startFake(t, f, time.Hour)
	m.next(t)
	m.reqs <- CmdParamChange
	m.reqs <- CmdStop
	if s := m.next(t); s.State != StateStopPending {
		t.Fatalf("after stop: %+v", s)
	}
	<-m.done
	if !f.stopped.Load() || m.code != 0 || f.reloads.Load() != 0 {
		t.Fatalf("stopped %v, code %d, reloads %d", f.stopped.Load(), m.code, f.reloads.Load())
	}
}

// A relay that fails ends the service with exit code 1 and its error
// (the manager's recovery actions then restart it), as does a drain that
// fails.
func TestExecuteRelayFails(t *testing.T) {
	f := newRelayFake()
	m := startFake(t, f, time.Hour)
	m.next(t)
	close(f.ready)
	m.next(t)
	boom := errors.New("boom")
	f.fail <- boom
	<-m.done
	if m.code != 1 || !errors.Is(m.err, boom) {
		t.Fatalf("code %d, err %v", m.code, m.err)
	}

	f = newRelayFake()
	f.drainErr = errors.New("drain: 3 updates unconfirmed")
	m = startFake(t, f, time.Hour)
	m.next(t)
	close(f.ready)
	m.next(t)
	m.reqs <- CmdStop
	m.next(t)
	<-m.done
	if m.code != 1 || m.err != f.drainErr {
		t.Fatalf("failed drain: code %d, err %v", m.code, m.err)
	}
}
