package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/internal/cli"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/ldm"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// runDemo runs everything on the embedded defaults: a three-node NATS
// cluster, a Warm OPC UA server pair with simulated tags, an MxAccess
// gateway pair, the relay and a consumer, through a scripted maintenance
// window under traffic. It prints a timeline and exits non-zero if an
// update was lost.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grace := fs.Duration("grace", 2*time.Second, "lame-duck grace period of the brokers")
	nTags := fs.Int("tags", 50, "simulated tags")
	mxTags := fs.Int("gateway-tags", 20, "simulated MxAccess gateway items (0: no gateway pair)")
	verbose := fs.Bool("v", false, "log what the relay does (to stderr)")
	pretty := fs.Bool("pretty", true, "console log format instead of JSON (with -v)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := zerolog.Nop()
	if *verbose {
		log = cli.NewLogger(stderr, *pretty, zerolog.InfoLevel)
	}
	if *mxTags < 0 {
		return fmt.Errorf("-gateway-tags %d: cannot be negative", *mxTags)
	}
	d := newDemo(stdout)
	d.mxTags = *mxTags
	if err := runMaintenance(ctx, d, *grace, *nTags, log); err != nil {
		return err
	}
	return d.report()
}

func newDemo(out io.Writer) *demo {
	return &demo{out: out, start: time.Now(), last: map[string]uint64{}}
}

// runMaintenance runs the scripted maintenance window: it is the demo, and
// the relay-maintenance benchmark under more load. With d.mxTags it adds an
// MxAccess gateway pair and its maintenance (demo_mx.go) after the OPC UA
// steps.
func runMaintenance(ctx context.Context, d *demo, grace time.Duration, nTags int, log zerolog.Logger) error {
	d.say("starting a three-node NATS cluster (lame-duck grace %v) and a Warm OPC UA pair (primary 250, standby 90) with %d tags at 10 Hz", grace, nTags)
	cl, err := natstest.Start(ctx, natstest.WithLameDuck(grace+time.Second, grace))
	if err != nil {
		return err
	}
	defer cl.Close()
	pair, err := uaserver.StartPair(ctx, uaserver.WithTags(nTags), uaserver.WithServiceLevels(250, 90))
	if err != nil {
		return err
	}
	defer pair.Close()
	var gx *galaxy
	if d.mxTags > 0 {
		d.say("starting an MxAccess gateway pair (gw-a, gw-b, warm standby) on one Galaxy with %d counters at 10 Hz", d.mxTags)
		if gx, err = startGalaxy(d, d.mxTags); err != nil {
			return err
		}
		defer gx.close()
	}

	// The consumer: an ApConnection too, so that it rides the brokers'
	// maintenance as well. The gateways answer at once: it listens to the
	// galaxy before the relay starts, not to miss its first values.
	consumer, err := apconn.Connect(ctx, cl.URLs(), apconn.WithName("demo-consumer"))
	if err != nil {
		return err
	}
	defer consumer.Close()
	if gx != nil {
		if err := gx.subscribe(consumer); err != nil {
			return err
		}
		consumer.Flush(ctx)
	}

	// The relay, as `apbridge run` builds it from its config.
	var tags []opcuasource.TagConfig
	for _, tg := range pair.Tags() {
		tags = append(tags, opcuasource.TagConfig{TagConfig: bridge.TagConfig{Name: tg.Name, Address: tg.NodeID().String(), Writable: tg.Writable()}})
	}
	handling := ldm.SwitchToPassive.String()
	sources := []relay.SourceConfig{{
		Name:       "line1",
		PairConfig: uaclient.PairConfig{Endpoints: pair.Endpoints()},
		Tags:       tags,
	}}
	if gx != nil {
		sources = append(sources, gx.source())
	}
	rl, err := relay.Start(ctx, &relay.Config{
		Instance: "demo",
		Subject:  "plant.{source}.{tag}",
		NATS:     relay.NATSConfig{Servers: cl.URLs(), Name: "apbridge-demo", LameDuckHandling: &handling},
		Sources:  sources,
	}, relay.WithLogger(log), relay.WithConnOptions(apconn.WithEventHandler(d.natsEvent)))
	if err != nil {
		return err
	}
	defer rl.Close()
	relayConn := rl.Conn()
	if _, err := consumer.Subscribe("plant.line1.>", d.update); err != nil {
		return err
	}
	if _, err := consumer.Subscribe(wire.EventSubject(wire.DefaultPrefix, "line1"), d.sourceEvent); err != nil {
		return err
	}
	consumer.Flush(ctx)
	if err := d.waitUpdates(ctx, 5*uint64(nTags), 15*time.Second); err != nil {
		return err
	}
	a, _ := relayConn.ActiveServer()
	p, _ := relayConn.PassiveServer()
	d.say("relay up: NATS active %s, warm passive %s; OPC UA on %s; %d tags flowing", a.Name, p.Name, pair.A().Name(), nTags)
	if gx != nil {
		if err := gx.waitUp(ctx, rl); err != nil {
			return err
		}
	}

	step := func(what string, f func() error) error {
		d.say("%s", what)
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return d.waitUpdates(ctx, d.received()+2*uint64(nTags), 15*time.Second)
	}
	// 1. Broker maintenance: the relay's active broker goes lame-duck.
	var ldmNode *natstest.Node
	if err := step("maintenance: the relay's active broker goes lame-duck", func() error {
		a, _ := relayConn.ActiveServer()
		ldmNode = cl.NodeByServerID(a.ID)
		d.mark("LDM call on " + ldmNode.Name())
		done := ldmNode.EnterLameDuck()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		d.say("  %s evicted its clients and stopped; restarting it", ldmNode.Name())
		return ldmNode.Restart(ctx)
	}); err != nil {
		return err
	}
	// 2. Server maintenance: the Warm primary stops gracefully.
	if err := step("maintenance: the OPC UA primary stops gracefully (ServiceLevel 0, the standby promotes to 250)", func() error {
		d.mark("graceful stop of " + pair.A().Name())
		sc := pair.A().GracefulStop(time.Second)
		pair.B().Promote()
		return sc.Wait(ctx)
	}); err != nil {
		return err
	}
	if err := step("the old primary comes back as the standby (boot 1, 50, then 90)", func() error {
		return pair.A().Boot(uaserver.BootSteps(uaserver.LevelStandby, 200*time.Millisecond)...).Wait(ctx)
	}); err != nil {
		return err
	}
	// 3. A broker dies.
	if err := step("failure: the relay's active broker is killed", func() error {
		a, _ := relayConn.ActiveServer()
		node := cl.NodeByServerID(a.ID)
		// A subscriber on a broker that dies loses what was in flight to
		// it (core NATS is at most once; see docs/jetstream.md). Keep the
		// consumer off the broker the demo kills, so that what is counted
		// is the relay.
		if c, _ := consumer.ActiveServer(); c.ID == a.ID {
			if err := consumer.SwitchToPassive(ctx); err != nil {
				return err
			}
		}
		d.mark("kill of " + node.Name())
		node.Kill()
		return node.Restart(ctx)
	}); err != nil {
		return err
	}
	// 4. Gateway maintenance and a gateway failure (demo_mx.go).
	if gx != nil {
		if err := gx.maintenance(ctx, rl); err != nil {
			return err
		}
	}
	// Let the last switch settle and everything in flight arrive.
	if err := ctxtime.Sleep(ctx, 500*time.Millisecond); err != nil {
		return err
	}
	rl.Shutdown(ctx)
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	consumer.Flush(fctx)
	cancel()
	return ctxtime.Sleep(ctx, 200*time.Millisecond)
}

// demo collects what the consumer and the relay report.
type demo struct {
	out   io.Writer
	start time.Time

	mu       sync.Mutex
	timeline []string
	marks    []time.Time
	last     map[string]uint64 // tag -> last sequence number
	n        uint64
	lost     uint64
	dup      uint64
	maxGap   time.Duration
	maxGapAt time.Time
	natsSw   []time.Duration // NATS switches, from the fault
	opcuaSw  []time.Duration // OPC UA failovers, from the fault to data again
	mxSw     []time.Duration // MxGateway switches, from the fault to the promotion
	mxTags   int             // MxAccess gateway items; 0 runs no gateway pair
	notes    []string        // summary lines of the report, before the totals
	lastAt   map[string]time.Time
	// lastSrc is each tag's latest source time; an update older than it
	// (outside a snapshot, which may repeat a value) left out of order.
	lastSrc    map[string]time.Time
	outOfOrder uint64
}

func (d *demo) say(format string, a ...any) {
	fmt.Fprintf(d.out, "%7.3fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, a...))
}

func (d *demo) mark(what string) {
	d.mu.Lock()
	d.marks = append(d.marks, time.Now())
	d.timeline = append(d.timeline, fmt.Sprintf("%7.3fs  %s", time.Since(d.start).Seconds(), what))
	d.mu.Unlock()
}

// note puts what happened at at on the timeline.
func (d *demo) note(at time.Time, what string) {
	d.mu.Lock()
	d.timeline = append(d.timeline, fmt.Sprintf("%7.3fs  %s", at.Sub(d.start).Seconds(), what))
	d.mu.Unlock()
}

// recordSwitch prints a switch that happened at at, puts it on the
// timeline and adds its time from the last fault to times.
func (d *demo) recordSwitch(at time.Time, line string, times *[]time.Duration) {
	d.say("  %s", line)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timeline = append(d.timeline, fmt.Sprintf("%7.3fs  %s", at.Sub(d.start).Seconds(), line))
	*times = append(*times, at.Sub(d.lastMarkLocked()))
}

func (d *demo) lastMark() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastMarkLocked()
}

func (d *demo) lastMarkLocked() time.Time {
	if len(d.marks) == 0 {
		return d.start
	}
	return d.marks[len(d.marks)-1]
}

func (d *demo) natsEvent(e apconn.Event) {
	if e.Kind != apconn.EventSwitched {
		return
	}
	line := fmt.Sprintf("NATS switch %s -> %s, cause %s: %v after the trigger, %v after the fault",
		e.From.Name, e.To.Name, e.Cause, e.Duration.Round(time.Microsecond), e.At.Sub(d.lastMark()).Round(time.Microsecond))
	d.recordSwitch(e.At, line, &d.natsSw)
}

func (d *demo) sourceEvent(m *nats.Msg) {
	var ev struct {
		Event  string        `json:"event"`
		Reason string        `json:"reason"`
		At     time.Time     `json:"at"`
		Health bridge.Health `json:"health"`
	}
	if json.Unmarshal(m.Data, &ev) != nil || ev.Event != "refresh-start" || !strings.Contains(ev.Reason, "failover") && !strings.Contains(ev.Reason, "ServiceLevel") {
		return
	}
	line := fmt.Sprintf("OPC UA %s: data again %v after the fault", ev.Reason, ev.At.Sub(d.lastMark()).Round(time.Millisecond))
	d.recordSwitch(ev.At, line, &d.opcuaSw)
}

func (d *demo) update(m *nats.Msg) {
	u, err := wire.DecodeJSON(m.Data)
	if err != nil {
		return
	}
	d.record(u, m.Header.Get(wire.HeaderRefresh) == "true", time.Now())
}

// record counts an update the consumer received at now; refresh is its
// refresh header.
func (d *demo) record(u wire.Update, refresh bool, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lastAt == nil {
		d.lastAt, d.lastSrc = map[string]time.Time{}, map[string]time.Time{}
	}
	if !u.SourceTime.IsZero() {
		if !refresh && u.SourceTime.Before(d.lastSrc[u.Tag]) {
			d.outOfOrder++
		}
		if u.SourceTime.After(d.lastSrc[u.Tag]) {
			d.lastSrc[u.Tag] = u.SourceTime
		}
	}
	prev := d.last[u.Tag]
	switch {
	case u.Seq <= prev:
		d.dup++
	case u.Seq > prev+1:
		d.lost += u.Seq - prev - 1
	}
	if u.Seq > prev {
		d.last[u.Tag] = u.Seq
	}
	// Counters change at every tick of the simulation (10 Hz); booleans
	// and setpoints stay put for long, and their silence means nothing.
	if t, ok := d.lastAt[u.Tag]; ok && now.Sub(t) > d.maxGap && strings.HasPrefix(u.Tag, "Counter") {
		d.maxGap, d.maxGapAt = now.Sub(t), now
	}
	d.lastAt[u.Tag] = now
	d.n++
}

func (d *demo) received() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

func (d *demo) waitUpdates(ctx context.Context, n uint64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for d.received() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d updates arrived within %v", d.received(), n, within)
		}
		if err := ctxtime.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) report() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	// By time only: what happened in the same millisecond stays in the
	// order it was noted (a fault before its switch).
	sort.SliceStable(d.timeline, func(i, j int) bool { return d.timeline[i][:8] < d.timeline[j][:8] })
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "timeline")
	for _, l := range d.timeline {
		fmt.Fprintln(d.out, l)
	}
	fmt.Fprintln(d.out)
	for _, l := range d.notes {
		fmt.Fprintln(d.out, l)
	}
	fmt.Fprintf(d.out, "tag updates received %d from %d tags; lost %d; duplicated %d; out of order %d; longest silence of a counter tag (10 Hz) %v (ending at %.3fs)\n",
		d.n, len(d.last), d.lost, d.dup, d.outOfOrder, d.maxGap.Round(time.Millisecond), d.maxGapAt.Sub(d.start).Seconds())
	if d.lost > 0 {
		fmt.Fprintln(d.out, "FAIL: tag updates were lost")
		return cli.ExitError{Code: 1}
	}
	if d.outOfOrder > 0 {
		fmt.Fprintln(d.out, "FAIL: tag updates left out of order (older in source time than the tag's last)")
		return cli.ExitError{Code: 1}
	}
	fmt.Fprintf(d.out, "OK: no tag update lost through the maintenance window (%.1fs)\n", time.Since(d.start).Seconds())
	return nil
}
