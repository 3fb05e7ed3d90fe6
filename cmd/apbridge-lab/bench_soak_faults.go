package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
)

// soakFault is one kind of fault the soak applies once per cycle. run
// applies it and undoes it (a restart, a heal); the soak then waits for
// the relay to be whole again.
type soakFault struct {
	name string
	run  func(r *soakRig, ctx context.Context) error
}

// soakFaults are the fault kinds; with the fleet, a relay kill too.
func soakFaults(fleet bool) []soakFault {
	fs := []soakFault{
		{"broker_ldm", (*soakRig).brokerLDM},
		{"broker_kill", (*soakRig).brokerKill},
		{"opcua_graceful", (*soakRig).opcuaGraceful},
		{"opcua_kill", (*soakRig).opcuaKill},
		{"opcua_freeze", (*soakRig).opcuaFreeze},
		{"gateway_restart", (*soakRig).gatewayRestart},
		{"gateway_kill", (*soakRig).gatewayKill},
	}
	if fleet {
		fs = append(fs, soakFault{soakRelayKill, (*soakRig).relayKill})
	}
	return fs
}

// activeBroker is the node the relay publishes through; with the fleet,
// a relay drawn from the seed.
func (r *soakRig) activeBroker() (*natstest.Node, error) {
	rel := r.relays[0]
	if len(r.relays) > 1 {
		rel = r.relays[r.rng.IntN(len(r.relays))]
	}
	st, err := rel.child.state()
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
func (r *soakRig) restartNode(ctx context.Context, n *natstest.Node) error {
	if err := n.Restart(ctx); err != nil {
		return err
	}
	if r.cfg.sink != soakSinkJetStream {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.cl.WaitStreamCurrent(wctx, soakStream); err != nil {
		return err
	}
	if len(r.relays) > 1 {
		// The fleet's leases live in a stream of their own: a second
		// broker fault before its replicas are current takes its quorum,
		// and every relay's leases expire at once.
		return r.cl.WaitStreamCurrent(wctx, "KV_"+soakFleetBucket)
	}
	return nil
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

// source is the view of one source of the relay that runs it. With the
// fleet, a source no relay runs at the moment has an empty health.
func (r *soakRig) source(name string) (bridge.Health, error) {
	for _, rel := range r.relays {
		if rel.child == nil {
			continue
		}
		st, err := rel.child.state()
		if err != nil {
			return bridge.Health{}, err
		}
		for _, s := range st.Sources {
			if s.Name == name && s.Health.State != bridge.StateNotOwned {
				return s.Health, nil
			}
		}
	}
	if len(r.relays) > 1 {
		return bridge.Health{}, nil
	}
	return bridge.Health{}, fmt.Errorf("the relay has no source %q", name)
}

// uaTarget is the OPC UA pair a fault hits; with more than one, drawn
// from the seed.
func (r *soakRig) uaTarget() *soakUA {
	if len(r.uas) == 1 {
		return r.uas[0]
	}
	return r.uas[r.rng.IntN(len(r.uas))]
}

// opcuaActive returns the server the relay reads ua from and the other.
func (r *soakRig) opcuaActive(ua *soakUA) (active, other *uaserver.Server, err error) {
	h, err := r.source(ua.name)
	if err != nil {
		return nil, nil, err
	}
	return ua.at(h.Endpoint)
}

// at returns the server of the pair at endpoint and the other.
func (ua *soakUA) at(endpoint string) (at, other *uaserver.Server, err error) {
	for i, s := range ua.pair.Servers() {
		if s.Endpoint() == endpoint {
			return s, ua.pair.Server(1 - i), nil
		}
	}
	return nil, nil, fmt.Errorf("the relay reads %s from %q, neither server", ua.name, endpoint)
}

// waitOPCUAOn waits until the relay reads ua from s.
func (r *soakRig) waitOPCUAOn(ctx context.Context, ua *soakUA, s *uaserver.Server) error {
	return r.poll(ctx, ua.name+" on "+s.Name(), 20*time.Second, func() (bool, error) {
		h, err := r.source(ua.name)
		return h.Endpoint == s.Endpoint(), err
	})
}

// opcuaGraceful is a planned stop of the active server: its peer becomes
// the primary, it announces ServiceLevel 0, stops, and boots again as the
// healthy follower.
func (r *soakRig) opcuaGraceful(ctx context.Context) error {
	ua := r.uaTarget()
	act, other, err := r.opcuaActive(ua)
	if err != nil {
		return err
	}
	other.Promote()
	if err := act.GracefulStop(300 * time.Millisecond).Wait(ctx); err != nil {
		return err
	}
	return act.Boot(uaserver.BootSteps(uaserver.LevelHealthyFollower, 100*time.Millisecond)...).Wait(ctx)
}

// opcuaKill kills the active server's process; its peer becomes the
// primary (as a redundant pair does when one dies) and it starts again as
// the follower.
func (r *soakRig) opcuaKill(ctx context.Context) error {
	ua := r.uaTarget()
	act, other, err := r.opcuaActive(ua)
	if err != nil {
		return err
	}
	act.Kill()
	other.Promote()
	if err := r.waitOPCUAOn(ctx, ua, other); err != nil {
		return err
	}
	return act.Restart(ctx, uaserver.LevelHealthyFollower)
}

// opcuaFreeze freezes the link to the active server (no error, no data)
// until the relay has moved to the other, then heals it. The frozen
// server stays up; the pair makes the other its primary.
func (r *soakRig) opcuaFreeze(ctx context.Context) error {
	ua := r.uaTarget()
	act, other, err := r.opcuaActive(ua)
	if err != nil {
		return err
	}
	act.Freeze()
	err = r.waitOPCUAOn(ctx, ua, other)
	other.Promote()
	act.SetLevel(uaserver.LevelHealthyFollower)
	act.Heal()
	return err
}

// gwTarget is the gateway pair a fault hits; with more than one, drawn
// from the seed.
func (r *soakRig) gwTarget() *soakGW {
	if len(r.gwps) == 1 {
		return r.gwps[0]
	}
	return r.gwps[r.rng.IntN(len(r.gwps))]
}

// gatewayActive returns the gateway the relay reads gw from and the other.
func (r *soakRig) gatewayActive(gw *soakGW) (active, other *mxsim.Gateway, err error) {
	h, err := r.source(gw.name)
	if err != nil {
		return nil, nil, err
	}
	for i, g := range gw.gws {
		if g.Addr() == h.Endpoint {
			return g, gw.gws[1-i], nil
		}
	}
	return nil, nil, fmt.Errorf("the relay reads %s from %q, neither gateway", gw.name, h.Endpoint)
}

func (r *soakRig) waitGatewayOn(ctx context.Context, gw *soakGW, g *mxsim.Gateway) error {
	return r.poll(ctx, gw.name+" on "+g.Addr(), 20*time.Second, func() (bool, error) {
		h, err := r.source(gw.name)
		return h.Endpoint == g.Addr(), err
	})
}

// gatewayRestart is a planned restart of the active gateway: it ends its
// sessions in order, stops once the relay has left, and starts again.
func (r *soakRig) gatewayRestart(ctx context.Context) error {
	gw := r.gwTarget()
	act, other, err := r.gatewayActive(gw)
	if err != nil {
		return err
	}
	act.EndStreams()
	if err := r.waitGatewayOn(ctx, gw, other); err != nil {
		return err
	}
	act.Kill()
	return act.Restart()
}

// gatewayKill kills the active gateway and starts it again once the relay
// has moved.
func (r *soakRig) gatewayKill(ctx context.Context) error {
	gw := r.gwTarget()
	act, other, err := r.gatewayActive(gw)
	if err != nil {
		return err
	}
	act.Kill()
	if err := r.waitGatewayOn(ctx, gw, other); err != nil {
		return err
	}
	return act.Restart()
}

// waitWhole waits until the relays are whole again after what: each with
// both NATS connections up on different brokers; every source run by one
// relay (with the fleet: the one ranked first for it), connected to a
// healthy server with a standby, the OPC UA standby's session live; and
// then every counter tag updated.
func (r *soakRig) waitWhole(ctx context.Context, what string) error {
	var why string
	lastPubs := make([]uint64, len(r.uas))
	err := r.poll(ctx, "the relays whole again", soakWholeWithin, func() (bool, error) {
		var ok bool
		var err error
		ok, why, err = r.wholeOnce(lastPubs)
		return ok, err
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

// wholeOnce is one look of waitWhole; lastPubs are the OPC UA standbys'
// publish counts at the last look, updated.
func (r *soakRig) wholeOnce(lastPubs []uint64) (bool, string, error) {
	runBy, endpoint := map[string]string{}, map[string]string{}
	var ids []string
	for _, rel := range r.relays {
		st, err := rel.child.state()
		if err != nil {
			return false, "", fmt.Errorf("relay %s: %w", rel.id, err)
		}
		ids = append(ids, rel.id)
		switch {
		case st.NATSActive == "" || st.NATSPassive == "" || st.NATSActive == st.NATSPassive:
			return false, fmt.Sprintf("relay %s: NATS active %q, passive %q", rel.id, st.NATSActive, st.NATSPassive), nil
		case !st.Ready:
			return false, fmt.Sprintf("relay %s not ready: %s", rel.id, strings.Join(st.Why, "; ")), nil
		}
		for _, s := range st.Sources {
			if s.Health.State == bridge.StateNotOwned {
				continue
			}
			if s.Health.State != bridge.StateConnected {
				return false, fmt.Sprintf("relay %s: source %s %s (%s)", rel.id, s.Name, s.Health.State, s.Health.Detail), nil
			}
			if other, ok := runBy[s.Name]; ok {
				return false, fmt.Sprintf("source %s run by relays %s and %s", s.Name, other, rel.id), nil
			}
			runBy[s.Name], endpoint[s.Name] = rel.id, s.Health.Endpoint
		}
	}
	if len(r.relays) > 1 {
		for _, name := range r.sourceNames() {
			if want := fleet.Rank(name, ids)[0]; runBy[name] != want {
				return false, fmt.Sprintf("source %s run by %q, ranked first: %s", name, runBy[name], want), nil
			}
		}
	}
	// The OPC UA standby's session is live when the server answers it
	// (its ServiceLevel subscription) between two looks.
	live, why := true, ""
	for i, ua := range r.uas {
		_, other, err := ua.at(endpoint[ua.name])
		if err != nil {
			return false, "", err
		}
		pubs := other.Stats().Publishes
		if !other.Running() || other.Stats().Sessions == 0 || lastPubs[i] == 0 || pubs <= lastPubs[i] {
			live, why = false, "no live OPC UA standby session on "+other.Name()+" ("+ua.name+")"
		}
		lastPubs[i] = pubs
	}
	return live, why, nil
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
