package uaserver

import (
	"context"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/gopcua/opcua/ua"
)

// Script is a scripted event running on a server (Boot, GracefulStop). A
// server runs one script at a time: a new scripted event, SetLevel,
// Promote, Demote, Kill or Restart cancels the running one, and so does
// closing the pair.
type Script struct {
	done   chan struct{}
	cancel context.CancelFunc
	err    error
}

// Done is closed when the script has finished or was cancelled.
func (sc *Script) Done() <-chan struct{} { return sc.done }

// Err returns nil while the script runs or if it completed, and the reason
// otherwise (context.Canceled if it was superseded).
func (sc *Script) Err() error {
	select {
	case <-sc.done:
		return sc.err
	default:
		return nil
	}
}

// Wait waits until the script is done or ctx ends.
func (sc *Script) Wait(ctx context.Context) error {
	select {
	case <-sc.done:
		return sc.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cancel stops the script where it is and waits for it.
func (sc *Script) Cancel() {
	sc.cancel()
	<-sc.done
}

// Boot runs a boot sequence: each step's level is published and held, then
// the next; a server that is down is restarted on its endpoint first,
// already publishing the first step's level. With no steps it runs
// BootSteps(the server's initial level, 200ms).
func (s *Server) Boot(steps ...LevelStep) *Script {
	if len(steps) == 0 {
		steps = BootSteps(s.pair.cfg.levels[s.index], 200*time.Millisecond)
	}
	steps = append([]LevelStep(nil), steps...)
	return s.runScript(func(ctx context.Context) error {
		if !s.Running() {
			if err := s.restart(ctx, steps[0].Level); err != nil {
				return err
			}
		}
		for i, st := range steps {
			s.setLevel(st.Level, "boot")
			if i == len(steps)-1 || st.Hold <= 0 {
				continue
			}
			if err := ctxtime.Sleep(ctx, st.Hold); err != nil {
				return err
			}
		}
		return nil
	})
}

// GracefulStop stops the server the way a redundant server leaves its
// pair on a planned stop, so that clients can fail over before their
// connection closes rather than after it: it publishes ServiceLevel 0
// (Maintenance: clients must leave) and ServerStatus.State Shutdown at
// once, keeps serving for delay, pushes out what subscriptions have
// queued, then stops: connections closed, port closed, as Kill. Clients
// subscribed to ServiceLevel see the 0 before their connection closes.
func (s *Server) GracefulStop(delay time.Duration) *Script {
	return s.runScript(func(ctx context.Context) error {
		s.setState(ua.ServerStateShutdown)
		s.setLevel(LevelMaintenance, "graceful stop")
		if err := ctxtime.Sleep(ctx, delay); err != nil {
			return err
		}
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		s.eng.flush(fctx)
		cancel()
		s.kill("graceful stop")
		return nil
	})
}

func (s *Server) runScript(f func(context.Context) error) *Script {
	ctx, cancel := context.WithCancel(context.Background())
	sc := &Script{done: make(chan struct{}), cancel: cancel}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		sc.err = ErrPairClosed
		close(sc.done)
		return sc
	}
	old := s.script
	s.script = sc
	s.scripts.Add(1)
	s.mu.Unlock()
	if old != nil {
		old.Cancel()
	}
	go func() {
		defer s.scripts.Done()
		defer close(sc.done)
		defer cancel()
		sc.err = f(ctx)
		s.mu.Lock()
		if s.script == sc {
			s.script = nil
		}
		s.mu.Unlock()
	}()
	return sc
}

// stopScript cancels the running script and waits for it.
func (s *Server) stopScript() {
	s.mu.Lock()
	sc := s.script
	s.script = nil
	s.mu.Unlock()
	if sc != nil {
		sc.Cancel()
	}
}
