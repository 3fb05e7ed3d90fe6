package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// galaxySource is the relay's source on the gateway pair.
const galaxySource = "galaxy"

// mxDowntime is how long a gateway the demo stops stays down.
const mxDowntime = time.Second

// galaxy is the demo's MxAccess gateway pair: two gateway simulators in
// front of one Galaxy of counters (each item adds 1 every 100 ms), relayed
// as the source "galaxy" with a warm standby, and what the consumer saw of
// those counters.
type galaxy struct {
	d     *demo
	n     int
	stop  func() // stops the counters
	gws   []*mxsim.Gateway
	names *strings.Replacer // gateway addresses -> gw-a, gw-b

	mu     sync.Mutex
	lastAt map[string]time.Time // tag -> when its last update arrived
	lastV  map[string]int64     // tag -> its highest counter value
	step   mxStep               // what the current step saw
	// open reports a promotion's refresh under way (refresh-start seen,
	// refresh-end not yet).
	open bool
}

// mxStep is what one gateway step did to the galaxy counters.
type mxStep struct {
	promotedAt time.Time     // refresh-start of the promotion
	currentAt  time.Time     // refresh-end: every tag has a value from the new active
	maxGap     time.Duration // the longest silence of a counter at the consumer
	missed     uint64        // counter values the consumer never saw, over all tags
	maxMissed  int64         // the most values one tag skipped at once
	tags       map[string]bool
}

// startGalaxy starts two gateways, gw-a (the primary) and gw-b, on one
// data source with n counters.
func startGalaxy(d *demo, n int) (_ *galaxy, err error) {
	data := mxsim.NewData()
	g := &galaxy{d: d, n: n, lastAt: map[string]time.Time{}, lastV: map[string]int64{}, step: mxStep{tags: map[string]bool{}}}
	g.stop = data.RunCounters("Galaxy_", n, 100*time.Millisecond)
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	var pairs []string
	for _, name := range []string{"gw-a", "gw-b"} {
		gw, err := mxsim.Start(data)
		if err != nil {
			return nil, err
		}
		gw.SetName(name)
		g.gws = append(g.gws, gw)
		pairs = append(pairs, gw.Addr(), name)
	}
	g.names = strings.NewReplacer(pairs...)
	return g, nil
}

func (g *galaxy) close() {
	for _, gw := range g.gws {
		gw.Close()
	}
	g.stop()
}

// source is the relay's config of the pair, as `apbridge run` reads it
// from a type: mxgateway source.
func (g *galaxy) source() relay.SourceConfig {
	tags := make([]bridge.TagConfig, g.n)
	for i := range tags {
		tags[i] = bridge.TagConfig{Name: fmt.Sprintf("Galaxy_%d", i), Address: fmt.Sprintf("Galaxy_%d.Value", i)}
	}
	return relay.SourceConfig{
		Name: galaxySource,
		Type: relay.TypeMxGateway,
		MxGateway: relay.MxGatewayConfig{
			Config: mxsource.Config{Endpoints: []string{g.gws[0].Addr(), g.gws[1].Addr()}},
			Tags:   tags,
		},
	}
}

func (g *galaxy) subscribe(consumer *apconn.Conn) error {
	if _, err := consumer.Subscribe("plant."+galaxySource+".>", g.update); err != nil {
		return err
	}
	_, err := consumer.Subscribe(wire.EventSubject(wire.DefaultPrefix, galaxySource), g.event)
	return err
}

// name replaces the gateways' addresses in s by their names.
func (g *galaxy) name(s string) string { return g.names.Replace(s) }

// health is the galaxy source's health as the relay reports it.
func (g *galaxy) health(rl *relay.Relay) bridge.Health {
	for _, s := range rl.Bridge().Stats() {
		if s.Name == galaxySource {
			return s.Health
		}
	}
	return bridge.Health{}
}

// waitUp waits for every counter to flow and the standby to be ready.
func (g *galaxy) waitUp(ctx context.Context, rl *relay.Relay) error {
	if err := g.waitFor(ctx, "the gateway pair up", 15*time.Second, func() bool {
		g.mu.Lock()
		flowing := len(g.lastV) == g.n
		g.mu.Unlock()
		return flowing && g.health(rl).State == bridge.StateConnected
	}); err != nil {
		return err
	}
	active := g.health(rl).Endpoint
	standby := g.other(active)
	if err := g.waitFor(ctx, "the standby's items added", 5*time.Second, func() bool {
		return standby.Stats().Items["AddItemBulk"] >= uint64(g.n)
	}); err != nil {
		return err
	}
	g.d.say("gateway pair up: galaxy on %s, warm standby %s (%d items added, %d advised); %d counters flowing",
		g.name(active), g.name(standby.Addr()), g.n, standby.Stats().Advised, g.n)
	return nil
}

// other returns the gateway that is not at addr.
func (g *galaxy) other(addr string) *mxsim.Gateway {
	if g.gws[0].Addr() == addr {
		return g.gws[1]
	}
	return g.gws[0]
}

// maintenance runs the gateway steps: a graceful restart of the active
// gateway, then a kill of the new active one.
func (g *galaxy) maintenance(ctx context.Context, rl *relay.Relay) error {
	if err := g.outage(ctx, rl, true); err != nil {
		return err
	}
	return g.outage(ctx, rl, false)
}

// outage takes the active gateway down, gracefully (its sessions end in
// order, then its process stops) or not (its process dies), and starts it
// again mxDowntime after: the relay promotes the standby, and the gateway
// comes back as the new standby.
func (g *galaxy) outage(ctx context.Context, rl *relay.Relay, graceful bool) error {
	d := g.d
	active := g.health(rl).Endpoint
	to := g.other(active)
	from := g.other(to.Addr())
	if from.Addr() != active {
		return fmt.Errorf("galaxy: the active endpoint %q is neither gateway", active)
	}
	fromName, toName := g.name(from.Addr()), g.name(to.Addr())
	what := fmt.Sprintf("failure: the active gateway %s is killed (it starts again %v later)", fromName, mxDowntime)
	if graceful {
		what = fmt.Sprintf("maintenance: the active gateway %s restarts gracefully (ends its sessions, stops, starts again %v later)", fromName, mxDowntime)
	}
	d.say("%s", what)
	g.mu.Lock()
	g.step, g.open = mxStep{tags: map[string]bool{}}, false
	g.mu.Unlock()
	switched := func() bool { return g.health(rl).Endpoint == to.Addr() }
	if graceful {
		d.mark("graceful restart of " + fromName + ": it ends its sessions")
		from.EndStreams()
		// A gateway shutting down in order exits once its clients have
		// gone. EndStreams returns before the streams' ends have reached
		// them: a Kill at once would break the streams instead.
		if err := g.waitFor(ctx, "the switch to "+toName, 10*time.Second, switched); err != nil {
			return err
		}
		from.Kill()
		d.note(time.Now(), fromName+" stops")
	} else {
		d.mark("kill of " + fromName)
		from.Kill()
	}
	fault := d.lastMark()
	if err := g.waitFor(ctx, "the switch to "+toName, 10*time.Second, func() bool {
		g.mu.Lock()
		current := !g.step.currentAt.IsZero()
		g.mu.Unlock()
		return current && switched()
	}); err != nil {
		return err
	}
	// Until the gateway is back the relay has no standby. (After a
	// graceful end it may have opened a session on the stopping gateway
	// again for a moment: a session ended in order does not say that the
	// gateway goes.) If that takes longer, the line below says so.
	if err := g.waitFor(ctx, "no standby", 2*time.Second, func() bool { return g.health(rl).State != bridge.StateConnected }); err != nil && ctx.Err() != nil {
		return err
	}
	h := g.health(rl)
	d.say("  source health: endpoint %s, %s%s", g.name(h.Endpoint), h.State, healthDetail(h))

	if err := ctxtime.Sleep(ctx, time.Until(fault.Add(mxDowntime))); err != nil {
		return err
	}
	from.ResetStats()
	if err := from.Restart(); err != nil {
		return err
	}
	restarted := time.Now()
	d.note(restarted, "restart of "+fromName)
	if err := g.waitFor(ctx, fromName+" back as the standby", 20*time.Second, func() bool {
		h := g.health(rl)
		return h.State == bridge.StateConnected && h.Endpoint == to.Addr() && from.Stats().Items["AddItemBulk"] >= uint64(g.n)
	}); err != nil {
		return err
	}
	st := from.Stats()
	d.say("  %s restarted and is back as the standby %v after its restart (source health %s on %s; %d items added, %d advised)",
		fromName, time.Since(restarted).Round(time.Millisecond), g.health(rl).State, toName, g.n, st.Advised)
	// The counters run on for a while: a silence ends with an update.
	if err := ctxtime.Sleep(ctx, 300*time.Millisecond); err != nil {
		return err
	}
	g.mu.Lock()
	s := g.step
	g.mu.Unlock()
	missed := "no counter value missed"
	if s.missed > 0 {
		missed = fmt.Sprintf("%d counter values never relayed, on %d of %d tags (at most %d in a row): the warm standby advises at its promotion and sends the current values, not those in between",
			s.missed, len(s.tags), g.n, s.maxMissed)
	}
	kind := "kill"
	if graceful {
		kind = "graceful restart"
	}
	summary := fmt.Sprintf("gateway %s of %s: switch to %s %v after the fault, every tag current %v after it; longest silence of a galaxy counter %v (period 100ms); %s",
		kind, fromName, toName, s.promotedAt.Sub(fault).Round(time.Microsecond), s.currentAt.Sub(fault).Round(time.Microsecond),
		s.maxGap.Round(time.Millisecond), missed)
	d.say("  %s", summary)
	d.mu.Lock()
	d.notes = append(d.notes, summary)
	d.mu.Unlock()
	return nil
}

// healthDetail is the first clause of h's detail ("no standby gateway"), the
// error that follows is the session's.
func healthDetail(h bridge.Health) string {
	if h.Detail == "" {
		return ""
	}
	first, _, _ := strings.Cut(h.Detail, ":")
	return " (" + first + ")"
}

// waitFor polls cond until it holds, for at most within.
func (g *galaxy) waitFor(ctx context.Context, what string, within time.Duration, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("galaxy: %s: not within %v", what, within)
		}
		if err := ctxtime.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// update is the consumer's handler of the galaxy tags: the demo counts
// them with the others, and here the counters' silences and skipped
// values.
func (g *galaxy) update(m *nats.Msg) {
	u, err := wire.DecodeJSON(m.Data)
	if err != nil {
		return
	}
	now := time.Now()
	g.d.record(u, m.Header.Get(wire.HeaderRefresh) == "true", now)
	v, ok := u.Value.(int64)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.lastAt[u.Tag]; ok && now.Sub(t) > g.step.maxGap {
		g.step.maxGap = now.Sub(t)
	}
	g.lastAt[u.Tag] = now
	last, ok := g.lastV[u.Tag]
	if ok && v > last+1 {
		g.step.missed += uint64(v - last - 1)
		g.step.maxMissed = max(g.step.maxMissed, v-last-1)
		g.step.tags[u.Tag] = true
	}
	if !ok || v > last {
		g.lastV[u.Tag] = v
	}
}

// event is the consumer's handler of the galaxy source's events: a
// promotion opens a refresh ("cause: from -> to"), which ends when every
// tag has its value from the new active.
func (g *galaxy) event(m *nats.Msg) {
	var ev struct {
		Event  string    `json:"event"`
		Reason string    `json:"reason"`
		At     time.Time `json:"at"`
	}
	if json.Unmarshal(m.Data, &ev) != nil {
		return
	}
	d := g.d
	switch ev.Event {
	case "refresh-start":
		i := strings.LastIndex(ev.Reason, ": ")
		if i < 0 || !strings.Contains(ev.Reason[i:], " -> ") {
			return
		}
		g.mu.Lock()
		g.open = true
		if g.step.promotedAt.IsZero() {
			g.step.promotedAt = ev.At
		}
		g.mu.Unlock()
		line := fmt.Sprintf("MxGateway switch %s, cause %s: standby promoted %v after the fault",
			g.name(ev.Reason[i+2:]), ev.Reason[:i], ev.At.Sub(d.lastMark()).Round(time.Microsecond))
		d.recordSwitch(ev.At, line, &d.mxSw)
	case "refresh-end":
		g.mu.Lock()
		open := g.open
		g.open = false
		if open && g.step.currentAt.IsZero() {
			g.step.currentAt = ev.At
		}
		g.mu.Unlock()
		if open {
			d.say("  MxGateway refresh done: every galaxy tag current again %v after the fault", ev.At.Sub(d.lastMark()).Round(time.Microsecond))
			d.note(ev.At, "MxGateway refresh done: every galaxy tag current again")
		}
	}
}
