package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/nats-io/jsm.go"
	"github.com/nats-io/nats.go"
)

func jsScenarios() []scenario {
	return []scenario{
		{"js-maintenance", "JetStream sink under load: LDM of the stream leader's node, kill of a node, OPC UA graceful failover; stream audited", benchJSMaintenance},
		{"js-hot-hot", "two relays on one source into one R3 stream, one killed mid-run; stream audited", benchJSHotHot},
		{"js-throughput", "updates/s stored in an R3 stream, against the core sink in the same run", benchJSThroughput},
	}
}

func startJSBenchCluster(ctx context.Context, cfg benchConfig) (*natstest.Cluster, error) {
	return startBenchCluster(ctx, cfg, natstest.WithJetStream())
}

// jsRelay is one relay of a benchmark: ApConnection, JetStream sink,
// bridge, on a view of a shared source.
type jsRelay struct {
	rl   *relay.Relay
	conn *apconn.Conn
	sink *jetstreamsink.Sink
	b    *bridge.Bridge
	view *simsource.Relay
}

// startJSRelay starts a relay on a new view of src.
func startJSRelay(ctx context.Context, cl *natstest.Cluster, cfg benchConfig, src *simsource.Shared,
	js jetstreamsink.Config, tags []bridge.TagConfig) (*jsRelay, error) {
	view := src.Relay()
	r, err := startJSRelayOn(ctx, cl, cfg, view, js, tags)
	if err != nil {
		return nil, err
	}
	r.view = view
	return r, nil
}

// startJSRelayOn starts a relay on any source.
func startJSRelayOn(ctx context.Context, cl *natstest.Cluster, cfg benchConfig, src bridge.Source,
	js jetstreamsink.Config, tags []bridge.TagConfig) (*jsRelay, error) {
	rl, err := startSimRelay(ctx, cl, cfg, src, tags, relay.SinkConfig{Sink: relay.SinkJetStream, JetStream: js})
	if err != nil {
		return nil, err
	}
	return &jsRelay{rl: rl, conn: rl.Conn(), sink: rl.JetStream(), b: rl.Bridge()}, nil
}

// stop shuts the relay down in order: bridge (flushing), sink, connection.
func (r *jsRelay) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.rl.Shutdown(ctx)
}

// kill stops the relay as a crashed process would: deliveries stop, what
// was not acknowledged is abandoned, the sockets close.
func (r *jsRelay) kill() {
	if r.view != nil {
		r.view.Kill()
	}
	r.sink.Close()
	r.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.b.Shutdown(ctx)
}

// stored is how many updates the stream acknowledged as new.
func (r *jsRelay) stored() uint64 {
	s := r.sink.Stats()
	return s.Acked - s.Duplicates
}

// waitCond polls cond until it holds, ctx ends or d passes.
func waitCond(ctx context.Context, what string, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", d, what)
		}
		if err := ctxtime.Sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// waitMore waits until n more updates than now are stored by r.
func waitMore(ctx context.Context, r *jsRelay, what string, n uint64) error {
	before := r.stored()
	return waitCond(ctx, what, 30*time.Second, func() bool { return r.stored() >= before+n })
}

// finishAndAudit stops the source, lets r store everything it was handed,
// and compares the stream with what the source produced.
func finishAndAudit(ctx context.Context, cl *natstest.Cluster, src *simsource.Shared, r *jsRelay, stream string) (natstest.StreamAudit, error) {
	src.Close()
	if err := waitCond(ctx, "the relay to take everything", 30*time.Second, r.view.Idle); err != nil {
		return natstest.StreamAudit{}, err
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.sink.Flush(fctx); err != nil {
		return natstest.StreamAudit{}, fmt.Errorf("flush: %w", err)
	}
	nc, err := nats.Connect(cl.URLs()[0], append(cl.ClientOptions(), nats.MaxReconnects(-1))...)
	if err != nil {
		return natstest.StreamAudit{}, err
	}
	defer nc.Close()
	stored, err := natstest.ReadStream(fctx, nc, stream)
	if err != nil {
		return natstest.StreamAudit{}, fmt.Errorf("read the stream back: %w", err)
	}
	expected := src.ExpectedIDs(func(tag string) string { s, _ := r.b.Subject(src.Name(), tag); return s })
	a := natstest.Audit(expected, stored)
	// The bench keeps the disk tidy: the bridge itself never deletes a
	// stream.
	if mgr, err := jsm.New(nc); err == nil {
		mgr.DeleteStream(stream)
	}
	return a, nil
}

// jsTotals adds up the audits of a scenario's runs.
type jsTotals struct {
	expected, stored, lost, dup, reordered, unexpected uint64
	republished, timeouts, duplicates, conflicts       uint64
}

func (t *jsTotals) add(a natstest.StreamAudit, s ...jetstreamsink.Stats) {
	t.expected += a.Expected
	t.stored += a.Stored
	t.lost += a.Lost
	t.dup += a.Duplicated
	t.reordered += a.OutOfOrder
	t.unexpected += a.Unexpected
	for _, st := range s {
		t.republished += st.Republished
		t.timeouts += st.Timeouts
		t.duplicates += st.Duplicates
		t.conflicts += st.Conflicts
	}
}

func (t *jsTotals) result(runs int) *result {
	r := &result{Runs: runs, Lost: t.lost, Duplicated: t.dup}
	r.set("expected", t.expected)
	r.set("stored", t.stored)
	r.set("out_of_order", t.reordered)
	r.set("unexpected", t.unexpected)
	r.set("republished", t.republished)
	r.set("ack_timeouts", t.timeouts)
	r.set("dropped_by_stream_as_duplicate", t.duplicates)
	r.set("conflicts", t.conflicts)
	return r
}

// The js-maintenance load: 100 OPC UA tags changing every 10 ms.
const (
	jsMaintTags   = 100
	jsMaintPeriod = 10 * time.Millisecond
)

// benchJSMaintenance relays a Warm OPC UA pair (100 tags changing every
// 10 ms, published every 10 ms) into an R3 stream and runs, under that load: LDM
// of the stream leader's node, kill of a node (the stream leader on odd
// runs, the relay's active broker on even ones), and a graceful failover
// of the OPC UA primary. Then the stream is compared with every update the
// source handed the relay.
func benchJSMaintenance(ctx context.Context, cfg benchConfig) (*result, error) {
	cl, err := startJSBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var tot jsTotals
	var switches, rates []float64
	for run := 1; run <= cfg.runs; run++ {
		start := time.Now()
		a, st, sw, err := jsMaintenanceOnce(ctx, cl, cfg, run)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		rate := float64(a.Expected) / time.Since(start).Seconds()
		tot.add(a, st)
		switches = append(switches, sw...)
		rates = append(rates, rate)
		fmt.Fprintf(cfg.progress, "  run %d: %d updates from the source (%.0f/s), %d stored: lost %d, duplicated %d, out of order %d; sent again %d (timeouts %d, leader elections %d, switches %d), acked as duplicate %d\n",
			run, a.Expected, rate, a.Stored, a.Lost, a.Duplicated, a.OutOfOrder, st.Republished, st.Timeouts, st.LeaderElections, st.Switches, st.Duplicates)
	}
	r := tot.result(cfg.runs)
	r.switchTimes = switches
	r.set("source", fmt.Sprintf("OPC UA Warm pair (testcluster), %d tags changing every %v", jsMaintTags, jsMaintPeriod))
	r.set("source_updates_per_s_p50", round0(percentile(rates, 50)))
	r.set("grace_ms", ms(cfg.grace))
	return r, nil
}

func jsMaintenanceOnce(ctx context.Context, cl *natstest.Cluster, cfg benchConfig, run int) (natstest.StreamAudit, jetstreamsink.Stats, []float64, error) {
	var a natstest.StreamAudit
	var st jetstreamsink.Stats
	pair, err := uaserver.StartPair(ctx, uaserver.WithTags(jsMaintTags), uaserver.WithTagInterval(jsMaintPeriod),
		uaserver.WithServiceLevels(250, 90))
	if err != nil {
		return a, st, nil, err
	}
	defer pair.Close()
	name := "line" + strconv.Itoa(run)
	// Every change reaches the relay: publishing and sampling as fast as
	// the tags change.
	interval := int(jsMaintPeriod / time.Millisecond)
	opc, err := opcuasource.New(name, uaclient.PairConfig{Endpoints: pair.Endpoints(),
		PublishingIntervalMilliseconds: &interval, SamplingIntervalMilliseconds: &interval}, opcuasource.WithLogger(cfg.log))
	if err != nil {
		return a, st, nil, err
	}
	src := simsource.Share(opc).Synchronous()
	defer src.Close()
	var tags []bridge.TagConfig
	for _, tg := range pair.Tags() {
		tags = append(tags, bridge.TagConfig{Name: tg.Name, Address: tg.NodeID().String()})
	}
	stream := fmt.Sprintf("MAINT%d", run)
	r, err := startJSRelay(ctx, cl, cfg, src, jetstreamsink.Config{Stream: stream, AckTimeout: time.Second}, tags)
	if err != nil {
		return a, st, nil, err
	}
	defer r.stop()
	var swMu sync.Mutex
	var switches []float64
	stopEv := r.conn.OnEvent(func(e apconn.Event) {
		if e.Kind == apconn.EventSwitched {
			swMu.Lock()
			switches = append(switches, ms(e.Duration))
			swMu.Unlock()
		}
	})
	defer stopEv()
	if err := waitMore(ctx, r, "traffic", 2000); err != nil {
		return a, st, nil, err
	}

	// 1. LDM of the node that leads the stream.
	leader, err := cl.StreamLeader(ctx, stream)
	if err != nil {
		return a, st, nil, err
	}
	fmt.Fprintf(cfg.progress, "    LDM of %s (stream leader)\n", leader.Name())
	select {
	case <-leader.EnterLameDuck():
	case <-ctx.Done():
		return a, st, nil, ctx.Err()
	}
	if err := waitMore(ctx, r, "traffic after the LDM", 2000); err != nil {
		return a, st, nil, err
	}
	if err := restartCurrent(ctx, cl, leader, stream); err != nil {
		return a, st, nil, err
	}

	// 2. Kill of a node: the stream leader, or the relay's active broker.
	victim, err := cl.StreamLeader(ctx, stream)
	if err != nil {
		return a, st, nil, err
	}
	role := "stream leader"
	if run%2 == 0 {
		act, _ := r.conn.ActiveServer()
		victim, role = cl.NodeByServerID(act.ID), "relay's active broker"
		if victim == nil {
			return a, st, nil, errors.New("active broker not found")
		}
	}
	fmt.Fprintf(cfg.progress, "    kill of %s (%s)\n", victim.Name(), role)
	victim.Kill()
	if err := waitMore(ctx, r, "traffic after the kill", 2000); err != nil {
		return a, st, nil, err
	}
	if err := restartCurrent(ctx, cl, victim, stream); err != nil {
		return a, st, nil, err
	}

	// 3. OPC UA graceful failover: the primary stops (ServiceLevel 0), the
	// standby promotes; the source sends every tag again from the new
	// server, with the same source timestamps.
	primary, standby := pair.A(), pair.B()
	fmt.Fprintf(cfg.progress, "    OPC UA graceful failover %s -> %s\n", primary.Name(), standby.Name())
	sc := primary.GracefulStop(time.Second)
	standby.Promote()
	if err := sc.Wait(ctx); err != nil {
		return a, st, nil, err
	}
	if err := waitMore(ctx, r, "traffic after the OPC UA failover", 2000); err != nil {
		return a, st, nil, err
	}
	if err := primary.Boot(uaserver.BootSteps(uaserver.LevelStandby, 200*time.Millisecond)...).Wait(ctx); err != nil {
		return a, st, nil, err
	}
	if err := waitMore(ctx, r, "traffic at the end", 1000); err != nil {
		return a, st, nil, err
	}
	a, err = finishAndAudit(ctx, cl, src, r, stream)
	swMu.Lock()
	defer swMu.Unlock()
	return a, r.sink.Stats(), append([]float64(nil), switches...), err
}

// restartCurrent restarts a node that went down and waits until the
// stream's replicas are all current again.
func restartCurrent(ctx context.Context, cl *natstest.Cluster, n *natstest.Node, stream string) error {
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := n.Restart(rctx); err != nil {
		return fmt.Errorf("restart %s: %w", n.Name(), err)
	}
	return cl.WaitStreamCurrent(rctx, stream)
}

// benchJSHotHot runs two relays on one simulated source (50 tags at
// 100 Hz: 5,000 updates/s) into one R3 stream, kills one relay mid-run,
// and compares the stream with what the source produced.
func benchJSHotHot(ctx context.Context, cfg benchConfig) (*result, error) {
	cl, err := startJSBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var tot jsTotals
	for run := 1; run <= cfg.runs; run++ {
		a, sa, sb, err := jsHotHotOnce(ctx, cl, cfg, run)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		tot.add(a, sa, sb)
		fmt.Fprintf(cfg.progress, "  run %d: %d updates from the source, %d stored: lost %d, duplicated %d, out of order %d; the killed relay had %d unacknowledged, the survivor's copies dropped as duplicates %d\n",
			run, a.Expected, a.Stored, a.Lost, a.Duplicated, a.OutOfOrder, sa.Pending, sb.Duplicates)
	}
	r := tot.result(cfg.runs)
	r.set("source", "SimSource shared by both relays, 50 tags at 100 Hz")
	return r, nil
}

func jsHotHotOnce(ctx context.Context, cl *natstest.Cluster, cfg benchConfig, run int) (natstest.StreamAudit, jetstreamsink.Stats, jetstreamsink.Stats, error) {
	var a natstest.StreamAudit
	var sa, sb jetstreamsink.Stats
	src := simsource.NewShared("hot" + strconv.Itoa(run))
	defer src.Close()
	tags := make([]bridge.TagConfig, 50)
	for i := range tags {
		tags[i] = bridge.TagConfig{Name: fmt.Sprintf("Line1.T%02d", i), Address: fmt.Sprintf("ns=1;s=T%02d", i)}
	}
	stream := fmt.Sprintf("HOTHOT%d", run)
	js := jetstreamsink.Config{Stream: stream, AckTimeout: time.Second}
	ra, err := startJSRelay(ctx, cl, cfg, src, js, tags)
	if err != nil {
		return a, sa, sb, err
	}
	defer ra.stop()
	rb, err := startJSRelay(ctx, cl, cfg, src, js, tags)
	if err != nil {
		return a, sa, sb, err
	}
	defer rb.stop()
	if err := waitCond(ctx, "tags subscribed", 10*time.Second, func() bool { return src.Sim().Subscribed() == len(tags) }); err != nil {
		return a, sa, sb, err
	}
	src.Sim().Run(10 * time.Millisecond)
	if err := waitCond(ctx, "traffic through both relays", 30*time.Second, func() bool {
		return ra.sink.Stats().Acked > 5000 && rb.sink.Stats().Acked > 5000
	}); err != nil {
		return a, sa, sb, err
	}
	// Kill whichever relay is ahead, alternately.
	victim, survivor := ra, rb
	if run%2 == 0 {
		victim, survivor = rb, ra
	}
	sa = victim.sink.Stats()
	victim.kill()
	if err := waitMore(ctx, survivor, "traffic after the kill", 5000); err != nil {
		return a, sa, sb, err
	}
	a, err = finishAndAudit(ctx, cl, src, survivor, stream)
	return a, sa, survivor.sink.Stats(), err
}

// benchJSThroughput measures what the relay stores in an R3 stream, flat
// out from a simulated source of 1,000 tags, and what the same relay with
// the core sink delivers to a subscriber, both for 10 s per run, in the
// same process and the same cluster.
func benchJSThroughput(ctx context.Context, cfg benchConfig) (*result, error) {
	cl, err := startJSBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	const tags = 1000
	window := 10 * time.Second
	var jsRates, plainRates []float64
	var last jetstreamsink.Stats
	for run := 1; run <= cfg.runs; run++ {
		jr, st, err := jsThroughputOnce(ctx, cl, cfg, run, tags, window)
		if err != nil {
			return nil, fmt.Errorf("run %d: jetstream: %w", run, err)
		}
		pr, err := plainThroughputOnce(ctx, cl, cfg, run, tags, window)
		if err != nil {
			return nil, fmt.Errorf("run %d: core: %w", run, err)
		}
		jsRates, plainRates, last = append(jsRates, jr), append(plainRates, pr), st
		fmt.Fprintf(cfg.progress, "  run %d: jetstream R3 %.0f/s stored, core %.0f/s delivered (%.2f); window full %d times\n",
			run, jr, pr, jr/pr, st.Blocked)
	}
	res := &result{Runs: cfg.runs}
	delivered, plain := percentile(jsRates, 50), percentile(plainRates, 50)
	res.set("tags", tags)
	res.set("window_s", window.Seconds())
	res.set("delivered_per_s", round0(delivered))
	res.set("plain_per_s", round0(plain))
	res.set("ratio", round3(delivered/plain))
	res.set("delivered_per_s_min", round0(percentile(jsRates, 0)))
	res.set("replicas", 3)
	res.set("storage", "file")
	res.set("publishes_blocked_last_run", last.Blocked)
	return res, nil
}

func jsThroughputOnce(ctx context.Context, cl *natstest.Cluster, cfg benchConfig, run, tags int, window time.Duration) (float64, jetstreamsink.Stats, error) {
	sim := simsource.New("tp" + strconv.Itoa(run))
	tcs := make([]bridge.TagConfig, tags)
	for i := range tcs {
		tcs[i] = bridge.TagConfig{Name: "Line1.T" + strconv.Itoa(i), Address: "ns=1;s=T" + strconv.Itoa(i)}
	}
	stream := fmt.Sprintf("THROUGHPUT%d", run)
	r, err := startJSRelayOn(ctx, cl, cfg, sim, jetstreamsink.Config{Stream: stream}, tcs)
	if err != nil {
		return 0, jetstreamsink.Stats{}, err
	}
	defer func() {
		r.stop()
		nc, err := nats.Connect(cl.URLs()[0], cl.ClientOptions()...)
		if err == nil {
			if mgr, err := jsm.New(nc); err == nil {
				mgr.DeleteStream(stream)
			}
			nc.Close()
		}
	}()
	if err := waitCond(ctx, "tags subscribed", 10*time.Second, func() bool { return sim.Subscribed() == tags }); err != nil {
		return 0, jetstreamsink.Stats{}, err
	}
	rate, err := flatOut(ctx, sim, r.stored, window)
	return rate, r.sink.Stats(), err
}

// flatOut emits every tag as fast as the relay takes them for window and
// returns the rate at which count grew.
func flatOut(ctx context.Context, sim *simsource.Source, count func() uint64, window time.Duration) (float64, error) {
	// Warm up for a second, then measure.
	warm := time.Now().Add(time.Second)
	for time.Now().Before(warm) && ctx.Err() == nil {
		sim.EmitAll()
	}
	c0, t0 := count(), time.Now()
	end := t0.Add(window)
	for time.Now().Before(end) && ctx.Err() == nil {
		sim.EmitAll()
	}
	c1, t1 := count(), time.Now()
	return float64(c1-c0) / t1.Sub(t0).Seconds(), ctx.Err()
}

func plainThroughputOnce(ctx context.Context, cl *natstest.Cluster, cfg benchConfig, run, tags int, window time.Duration) (float64, error) {
	sub, err := nats.Connect(cl.Node(2).URL(), cl.ClientOptions()...)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	var got atomic.Uint64
	name := "core" + strconv.Itoa(run)
	s, err := sub.Subscribe("apbridge."+name+".>", func(*nats.Msg) { got.Add(1) })
	if err != nil {
		return 0, err
	}
	s.SetPendingLimits(-1, -1)
	sub.Flush()
	sim := simsource.New(name)
	tcs := make([]bridge.TagConfig, tags)
	for i := range tcs {
		tcs[i] = bridge.TagConfig{Name: "Line1.T" + strconv.Itoa(i), Address: "ns=1;s=T" + strconv.Itoa(i)}
	}
	rl, err := startSimRelay(ctx, cl, cfg, sim, tcs, relay.SinkConfig{})
	if err != nil {
		return 0, err
	}
	defer rl.Close()
	if err := waitCond(ctx, "tags subscribed", 10*time.Second, func() bool { return sim.Subscribed() == tags }); err != nil {
		return 0, err
	}
	return flatOut(ctx, sim, got.Load, window)
}

// startSimRelay starts a relay, as relay.Start builds it from a config, on
// the embedded cluster with a source built here.
func startSimRelay(ctx context.Context, cl *natstest.Cluster, cfg benchConfig, src bridge.Source,
	tags []bridge.TagConfig, sink relay.SinkConfig) (*relay.Relay, error) {
	return relay.Start(ctx, &relay.Config{NATS: relay.NATSConfig{Servers: cl.URLs()}, SinkConfig: sink},
		relay.WithNATSOptions(cl.ClientOptions()...), relay.WithLogger(cfg.log), relay.WithSource(src, tags))
}
