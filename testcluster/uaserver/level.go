package uaserver

import (
	"context"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/gopcua/opcua/ua"
)

// ServiceLevel values the scripted events publish (OPC UA Part 4 6.6.2.4.2:
// 0 Maintenance, 1 NoData, 2-199 Degraded, 200-255 Healthy).
const (
	// LevelMaintenance is published by a server that is stopping: clients
	// must leave it.
	LevelMaintenance byte = 0
	// LevelNoData is published by a server that is up but has no data yet.
	LevelNoData byte = 1
	// LevelBooting is the Degraded level a booting server passes through.
	LevelBooting byte = 50
	// LevelStandby is a warm standby's level (Demote).
	LevelStandby byte = 90
	// LevelHealthyFollower is a healthy server that is not the primary.
	LevelHealthyFollower byte = 240
	// LevelPrimary is the healthy primary's level (Promote).
	LevelPrimary byte = 250

	// healthyLevel is where the Healthy band starts. Below it a server's
	// data items carry Bad_OutOfService and it refuses writes.
	healthyLevel byte = 200
)

// LevelStep is one step of a scripted ServiceLevel sequence: publish Level,
// then hold it for Hold before the next step.
type LevelStep struct {
	Level byte
	Hold  time.Duration
}

// BootSteps is the boot sequence of a redundant server that publishes
// ServiceLevel from the start: NoData (1) before it has data, then
// Degraded (50) while it comes up, each held for hold, then final (240 as
// a healthy follower or 250 as the primary). A client that connects
// meanwhile must see a level below 200 and prefer a Healthy peer.
func BootSteps(final byte, hold time.Duration) []LevelStep {
	return []LevelStep{{LevelNoData, hold}, {LevelBooting, hold}, {final, 0}}
}

// Health is what a server's ServiceLevel is computed from once a LevelFunc
// is set (see SetLevelFunc). The fields are what a redundant server's
// ServiceLevel calculator (Tiers) reads: whether it is a member of its
// redundancy group, whether its configuration store answers, whether its
// peer can reach it, whether its data is stale, and whether it is the
// primary. Tests set them with UpdateHealth; the pair never changes them
// itself.
type Health struct {
	// MemberUp: the node is an Up (or Joining) member of its redundancy
	// group.
	MemberUp bool
	// StoreReachable: its configuration store answers.
	StoreReachable bool
	// PeerProbeOK: the peer's probe of this server succeeds.
	PeerProbeOK bool
	// Stale: its data is stale.
	Stale bool
	// Primary: it is the pair's primary.
	Primary bool
}

// LevelFunc computes a ServiceLevel from health inputs. It must be a pure,
// fast function, as Tiers is.
type LevelFunc func(Health) byte

// levelState is a ServiceLevel and when it was set (its source timestamp).
type levelState struct {
	v  byte
	at time.Time
}

// Level returns the ServiceLevel the server publishes.
func (s *Server) Level() byte { return s.lvl.Load().v }

// SetLevel publishes a ServiceLevel: subscribers get it within one
// publishing interval. Crossing 200 also flips the status of every
// simulated tag between Good and Bad_OutOfService, and subscribers of tags
// get that change too. SetLevel cancels a running script. On a server that
// is down it only records the level; Restart sets the level it comes back
// with.
func (s *Server) SetLevel(l byte) {
	s.stopScript()
	s.setLevel(l, "set")
}

// Promote publishes 250, the primary's level.
func (s *Server) Promote() { s.SetLevel(LevelPrimary) }

// Demote publishes 90, a warm standby's level: its tags turn
// Bad_OutOfService and it refuses writes.
func (s *Server) Demote() { s.SetLevel(LevelStandby) }

func (s *Server) setLevel(l byte, why string) {
	s.lvlMu.Lock()
	old := s.lvl.Load().v
	if old == l {
		s.lvlMu.Unlock()
		return
	}
	s.lvl.Store(&levelState{v: l, at: time.Now()})
	s.lvlMu.Unlock()
	s.log.Info().Uint8("from", old).Uint8("to", l).Str("why", why).Msg("uaserver: ServiceLevel")
	// notify samples the current value, so concurrent changes converge on
	// the last one even if their notifications cross.
	s.eng.notify(s.nodeServiceLevel)
	if (old >= healthyLevel) != (l >= healthyLevel) {
		s.eng.notify(s.tagNodes...)
		s.eng.notify(s.setpointNodes...)
	}
}

// LevelEncoding is how a server serves its ServiceLevel (i=2267). Part 4
// defines the node as a Byte; the other encodings are the faults a client
// must survive: gopcua's own server, for one, has the node with no value.
type LevelEncoding int32

const (
	// LevelAsByte serves the level as a Byte (the default).
	LevelAsByte LevelEncoding = iota
	// LevelAsInt32 serves the same number as an Int32.
	LevelAsInt32
	// LevelNoValue serves a Good DataValue with no value (a null
	// Variant), as a server that never set the node does.
	LevelNoValue
	// LevelBadStatus serves the level with the status
	// Bad_WaitingForInitialData.
	LevelBadStatus
)

// SetLevelEncoding changes how the server serves its ServiceLevel, at once
// for reads and for subscribers; it persists across Kill and Restart. The
// level itself (Level, SetLevel, scripts) is unaffected.
func (s *Server) SetLevelEncoding(e LevelEncoding) {
	if LevelEncoding(s.lvlEnc.Swap(int32(e))) != e {
		s.log.Info().Int32("encoding", int32(e)).Msg("uaserver: ServiceLevel encoding")
		s.eng.notify(s.nodeServiceLevel)
	}
}

// SetLevelFunc makes the server compute its ServiceLevel from its Health:
// the level is f(health) now and after every UpdateHealth. Scripted events
// still publish their own levels; the next UpdateHealth recomputes. A nil f
// returns the level to manual control.
func (s *Server) SetLevelFunc(f LevelFunc) {
	s.mu.Lock()
	s.levelFn = f
	h := s.health
	s.mu.Unlock()
	if f != nil {
		s.setLevel(f(h), "level func")
	}
}

// UpdateHealth changes the server's health inputs and, if a LevelFunc is
// set, publishes the level it computes. It returns the server's level.
func (s *Server) UpdateHealth(update func(*Health)) byte {
	s.mu.Lock()
	update(&s.health)
	f, h := s.levelFn, s.health
	s.mu.Unlock()
	if f != nil {
		s.setLevel(f(h), "health")
	}
	return s.Level()
}

// Health returns the server's health inputs.
func (s *Server) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

func (s *Server) serviceLevelValue() *ua.DataValue {
	l := s.lvl.Load()
	dv := &ua.DataValue{Value: ua.MustVariant(l.v), SourceTimestamp: l.at, ServerTimestamp: time.Now()}
	switch LevelEncoding(s.lvlEnc.Load()) {
	case LevelAsInt32:
		dv.Value = ua.MustVariant(int32(l.v))
	case LevelNoValue:
		dv.Value = nil
	case LevelBadStatus:
		dv.Status = ua.StatusBadWaitingForInitialData
	}
	dv.UpdateMask()
	return dv
}

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
