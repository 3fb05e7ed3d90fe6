package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/testcluster"
)

// soakFault is one kind of fault the soak applies once per cycle. run
// applies it and undoes it (a restart, a heal); the soak then waits for
// the relay to be whole again.
type soakFault struct {
	name string
	run  func(r *soakRig, ctx context.Context) error
}

func soakFaults() []soakFault {
	return []soakFault{
		{"broker_ldm", (*soakRig).brokerLDM},
		{"broker_kill", (*soakRig).brokerKill},
		{"opcua_graceful", (*soakRig).opcuaGraceful},
		{"opcua_kill", (*soakRig).opcuaKill},
		{"opcua_freeze", (*soakRig).opcuaFreeze},
		{"gateway_restart", (*soakRig).gatewayRestart},
		{"gateway_kill", (*soakRig).gatewayKill},
	}
}

// activeBroker is the node the relay publishes through.
func (r *soakRig) activeBroker() (*testcluster.Node, error) {
	st, err := r.relay.state()
	if err != nil {
		return nil, err
	}
	n := r.cl.NodeByServerID(st.NATSActive)
	if n == nil {
		return nil, fmt.Errorf("the relay's active broker %q is none of the cluster's", st.NATSActive)
	}
	return n, nil
}

// restartNode starts a node the fault stopped and, with the JetStream
// sink, waits for the stream to be whole on it: a second node down before
// that would take the stream's quorum, a fault the soak does not model.
func (r *soakRig) restartNode(ctx context.Context, n *testcluster.Node) error {
	if err := n.Restart(ctx); err != nil {
		return err
	}
	if r.cfg.sink != soakSinkJetStream {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return r.cl.WaitStreamCurrent(wctx, soakStream)
}

// brokerLDM puts the relay's active broker in lame-duck mode, lets it
// evict its clients and stop, and starts it again.
func (r *soakRig) brokerLDM(ctx context.Context) error {
	n, err := r.activeBroker()
	if err != nil {
		return err
	}
	select {
	case <-n.EnterLameDuck():
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.restartNode(ctx, n)
}

// brokerKill kills the relay's active broker and starts it again. The
// subscriber is moved off it first: what a broker that dies had in
// flight to its own subscribers is lost (core NATS is at most once), and
// the soak measures the relay.
func (r *soakRig) brokerKill(ctx context.Context) error {
	n, err := r.activeBroker()
	if err != nil {
		return err
	}
	if c, ok := r.consumer.ActiveServer(); ok && c.ID == n.ServerID() {
		if err := r.consumer.SwitchToPassive(ctx); err != nil {
			return fmt.Errorf("subscriber off %s: %w", n.Name(), err)
		}
	}
	n.Kill()
	return r.restartNode(ctx, n)
}

// source is the relay's view of one of its sources.
func (r *soakRig) source(name string) (bridge.Health, error) {
	st, err := r.relay.state()
	if err != nil {
		return bridge.Health{}, err
	}
	for _, s := range st.Sources {
		if s.Name == name {
			return s.Health, nil
		}
	}
	return bridge.Health{}, fmt.Errorf("the relay has no source %q", name)
}

// opcuaActive returns the server the relay reads from and the other.
func (r *soakRig) opcuaActive() (active, other *testcluster.OPCUAServer, err error) {
	h, err := r.source("line1")
	if err != nil {
		return nil, nil, err
	}
	return r.opcuaAt(h.Endpoint)
}

// opcuaAt returns the server at endpoint and the other.
func (r *soakRig) opcuaAt(endpoint string) (at, other *testcluster.OPCUAServer, err error) {
	for i, s := range r.pair.Servers() {
		if s.Endpoint() == endpoint {
			return s, r.pair.Server(1 - i), nil
		}
	}
	return nil, nil, fmt.Errorf("the relay reads line1 from %q, neither server", endpoint)
}

// waitOPCUAOn waits until the relay reads line1 from s.
func (r *soakRig) waitOPCUAOn(ctx context.Context, s *testcluster.OPCUAServer) error {
	return r.poll(ctx, "line1 on "+s.Name(), 20*time.Second, func() (bool, error) {
		h, err := r.source("line1")
		return h.Endpoint == s.Endpoint(), err
	})
}

// opcuaGraceful is a planned stop of the active server: its peer becomes
// the primary, it announces ServiceLevel 0, stops, and boots again as the
// healthy follower.
func (r *soakRig) opcuaGraceful(ctx context.Context) error {
	act, other, err := r.opcuaActive()
	if err != nil {
		return err
	}
	other.Promote()
	if err := act.GracefulStop(300 * time.Millisecond).Wait(ctx); err != nil {
		return err
	}
	return act.Boot(testcluster.BootSteps(testcluster.LevelHealthyFollower, 100*time.Millisecond)...).Wait(ctx)
}

// opcuaKill kills the active server's process; its peer becomes the
// primary (as a redundant pair does when one dies) and it starts again as
// the follower.
func (r *soakRig) opcuaKill(ctx context.Context) error {
	act, other, err := r.opcuaActive()
	if err != nil {
		return err
	}
	act.Kill()
	other.Promote()
	if err := r.waitOPCUAOn(ctx, other); err != nil {
		return err
	}
	return act.Restart(ctx, testcluster.LevelHealthyFollower)
}

// opcuaFreeze freezes the link to the active server (no error, no data)
// until the relay has moved to the other, then heals it. The frozen
// server stays up; the pair makes the other its primary.
func (r *soakRig) opcuaFreeze(ctx context.Context) error {
	act, other, err := r.opcuaActive()
	if err != nil {
		return err
	}
	act.Freeze()
	err = r.waitOPCUAOn(ctx, other)
	other.Promote()
	act.SetLevel(testcluster.LevelHealthyFollower)
	act.Heal()
	return err
}

// gatewayActive returns the gateway the relay reads from and the other.
func (r *soakRig) gatewayActive() (active, other *testcluster.MxGateway, err error) {
	h, err := r.source(galaxySource)
	if err != nil {
		return nil, nil, err
	}
	for i, g := range r.gws {
		if g.Addr() == h.Endpoint {
			return g, r.gws[1-i], nil
		}
	}
	return nil, nil, fmt.Errorf("the relay reads %s from %q, neither gateway", galaxySource, h.Endpoint)
}

func (r *soakRig) waitGatewayOn(ctx context.Context, g *testcluster.MxGateway) error {
	return r.poll(ctx, "galaxy on "+g.Addr(), 20*time.Second, func() (bool, error) {
		h, err := r.source(galaxySource)
		return h.Endpoint == g.Addr(), err
	})
}

// gatewayRestart is a planned restart of the active gateway: it ends its
// sessions in order, stops once the relay has left, and starts again.
func (r *soakRig) gatewayRestart(ctx context.Context) error {
	act, other, err := r.gatewayActive()
	if err != nil {
		return err
	}
	act.EndStreams()
	if err := r.waitGatewayOn(ctx, other); err != nil {
		return err
	}
	act.Kill()
	return act.Restart()
}

// gatewayKill kills the active gateway and starts it again once the relay
// has moved.
func (r *soakRig) gatewayKill(ctx context.Context) error {
	act, other, err := r.gatewayActive()
	if err != nil {
		return err
	}
	act.Kill()
	if err := r.waitGatewayOn(ctx, other); err != nil {
		return err
	}
	return act.Restart()
}

// waitWhole waits until the relay is whole again after what: both NATS
// connections up on different brokers, both sources connected to a
// healthy server with a standby, the OPC UA standby's session live, and
// then every counter tag updated.
func (r *soakRig) waitWhole(ctx context.Context, what string) error {
	var why string
	var lastPubs uint64
	err := r.poll(ctx, "the relay whole again", soakWholeWithin, func() (bool, error) {
		st, err := r.relay.state()
		if err != nil {
			return false, err
		}
		switch {
		case st.NATSActive == "" || st.NATSPassive == "" || st.NATSActive == st.NATSPassive:
			why = fmt.Sprintf("NATS active %q, passive %q", st.NATSActive, st.NATSPassive)
			return false, nil
		case !st.Ready:
			why = "not ready: " + strings.Join(st.Why, "; ")
			return false, nil
		}
		var line1 string
		for _, s := range st.Sources {
			if s.Health.State != bridge.StateConnected {
				why = fmt.Sprintf("source %s %s (%s)", s.Name, s.Health.State, s.Health.Detail)
				return false, nil
			}
			if s.Name == "line1" {
				line1 = s.Health.Endpoint
			}
		}
		// The OPC UA standby's session is live when the server answers it
		// (its ServiceLevel subscription) between two looks.
		_, other, err := r.opcuaAt(line1)
		if err != nil {
			return false, err
		}
		pubs := other.Stats().Publishes
		live := other.Running() && other.Stats().Sessions > 0 && lastPubs != 0 && pubs > lastPubs
		lastPubs = pubs
		if !live {
			why = "no live OPC UA standby session on " + other.Name()
		}
		return live, nil
	})
	if err != nil {
		return fmt.Errorf("after %s: %w (%s)", what, err, why)
	}
	since := time.Now()
	if err := r.poll(ctx, "every counter updated", 20*time.Second, func() (bool, error) {
		return r.check.seenSince(r.counters, since), nil
	}); err != nil {
		return fmt.Errorf("after %s: %w", what, err)
	}
	return nil
}

// poll calls cond every 50 ms until it holds, fails, or within passes.
func (r *soakRig) poll(ctx context.Context, what string, within time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v", what, within)
		}
		if err := ctxtime.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}
