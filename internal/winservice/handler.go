// Package winservice runs the relay as a Windows service: the handler of
// the service control manager's requests, the Event Log as a log sink,
// and the install, uninstall, start and stop of the service.
//
// The handler's state machine and the Event Log writer are written for
// every platform, against this package's own mirror of the svc types, so
// that they are tested off Windows; only the files for Windows touch
// golang.org/x/sys/windows/svc. On other platforms Run, IsService and the
// management functions report ErrNotWindows.
package winservice

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNotWindows is returned off Windows by what only Windows has.
var ErrNotWindows = errors.New("the service command manages a Windows service, and this is not Windows (on Linux, run apbridge under systemd: deploy/systemd/apbridge.service)")

// Cmd is a control request of the service control manager (svc.Cmd).
type Cmd int

// The requests the handler acts on; any other is ignored.
const (
	CmdOther Cmd = iota
	CmdStop
	CmdShutdown
	CmdInterrogate
	CmdParamChange
)

// State is a service state (svc.State).
type State int

// The states the handler reports. Stopped is reported by svc.Run once
// Execute returns.
const (
	StateStartPending State = iota + 1
	StateRunning
	StateStopPending
)

// Accepts is the set of controls a state accepts (svc.Accepted).
type Accepts int

// The controls a running relay accepts.
const (
	AcceptStop Accepts = 1 << iota
	AcceptShutdown
	AcceptParamChange
)

// Status is what the handler reports to the service control manager
// (svc.Status).
type Status struct {
	State   State
	Accepts Accepts
	// CheckPoint rises while a start or stop is pending, so that the
	// service control manager sees progress and waits on.
	CheckPoint uint32
	// WaitHint is how long the pending operation may still take.
	WaitHint time.Duration
}

// Relay is what the service runs.
type Relay struct {
	// Run runs the relay until ctx ends and returns after its drain. It
	// calls ready once the relay runs (connected to NATS, sources
	// started); it may return before, with an error or because ctx
	// ended.
	Run func(ctx context.Context, ready func()) error
	// Reload asks the relay to reload its configuration (the
	// parameter-change control); it must not block.
	Reload func()
}

// Timing is how the handler paces the service control manager.
type Timing struct {
	// Start and Stop are the wait hints of the pending states: the
	// longest the start (the NATS connect) and the stop (the drain) may
	// take.
	Start, Stop time.Duration
	// CheckPoint is how often a pending state reports progress.
	CheckPoint time.Duration
}

// running accepts stop, shutdown and parameter change (the reload).
const running = AcceptStop | AcceptShutdown | AcceptParamChange

// Execute runs r as the service control manager directs, and returns the
// service's exit code (0, or 1 when the relay failed) with the relay's
// error. reqs delivers the manager's requests, each decoded by decode
// (the Windows handler passes svc.ChangeRequest and its decoder, tests a
// request of their own); report sends a status to the manager.
//
// The states: StartPending, with a rising checkpoint, until the relay is
// ready; then Running, accepting stop, shutdown and parameter change;
// StopPending at a stop or shutdown, which cancels the relay's context:
// the drain of SIGTERM, reported with a rising checkpoint until Run
// returns. A stop while the start is pending (which the manager does not
// send, but a shutdown may come) stops the start the same way.
func Execute[R any](ctx context.Context, r Relay, t Timing, reqs <-chan R, decode func(R) Cmd, report func(Status)) (uint32, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{})
	var readyOnce sync.Once
	done := make(chan error, 1)
	go func() {
		done <- r.Run(rctx, func() { readyOnce.Do(func() { close(ready) }) })
	}()
	cur := Status{State: StateStartPending, WaitHint: t.Start}
	report(cur)
	tick := time.NewTicker(t.CheckPoint)
	defer tick.Stop()
	for {
		select {
		case <-ready:
			ready = nil
			if cur.State == StateStartPending {
				cur = Status{State: StateRunning, Accepts: running}
				report(cur)
			}
		case <-tick.C:
			if cur.State == StateStartPending || cur.State == StateStopPending {
				cur.CheckPoint++
				report(cur)
			}
		case req := <-reqs:
			switch decode(req) {
			case CmdInterrogate:
				report(cur)
			case CmdStop, CmdShutdown:
				if cur.State != StateStopPending {
					cur = Status{State: StateStopPending, WaitHint: t.Stop}
					report(cur)
					cancel()
				}
			case CmdParamChange:
				if cur.State == StateRunning && r.Reload != nil {
					r.Reload()
				}
			}
		case err := <-done:
			if err != nil {
				return 1, err
			}
			return 0, nil
		}
	}
}
