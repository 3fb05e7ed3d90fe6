package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
)

// The sl-* scenarios run uaclient.Pair against uaserver's redundant
// OPC UA pair (16 simulated tags ticking every 100 ms, counters among
// them), inject one fault per run for real, and measure from the fault to
// the first Good value the consumer receives from the backup.
func slScenarios() []scenario {
	return []scenario{
		{"sl-graceful-stop", "Warm pair 250/90: the primary publishes 0 as the backup promotes to 250, and stops 1 s later", slRun(slGracefulStop, pairSubject)},
		{"sl-graceful-stop-poll", "the same with the poll-based client of the original ServiceLevel design: ServiceLevel read every 2 s, a new session per probe (baseline)", slRun(slGracefulStop, pollSubject)},
		{"sl-hard-kill", "pair 250/240: the primary's process dies (no 0 first)", slRun(slHardKill, pairSubject)},
		{"sl-freeze", "pair 250/240: the primary's link freezes (no error, no data)", slRun(slFreeze, pairSubject)},
		{"sl-blip", "pair 250/--standby-level (90: Warm): the primary's connection is reset once, the server stays up (must not switch, must lose nothing)", slRun(slBlip, pairSubject)},
		{"sl-long-blip", "pair 250/--standby-level (90: Warm): a blip longer than the session timeout: the primary's server forgets the session and its subscriptions, then the connection is reset (must not switch; the loss is counted)", slRun(slLongBlip, pairSubject)},
		{"sl-late-peer", "Warm pair 250/90: the primary publishes 0 while the standby is at 90; the standby rises to 250 --delay later (switch_after_rise_ms)", slRun(slLatePeer, pairSubject)},
		{"sl-late-peer-control", "the same without the rise: the standby stays at 90 (must not switch within the degraded window)", slRun(slLatePeerControl, pairSubject)},
		{"sl-connect-standby", "connect while the primary is the standby (90) and the backup 250; from the first sample", slRun(slConnectStandby, pairSubject)},
		{"sl-healthy-pair", "pair 250/240 for --duration, --runs Pairs side by side (must not switch)", benchSLHealthy},
	}
}

// slRun runs one fault against one subject, cfg.runs times.
func slRun(f slFault, subj slSubject) func(context.Context, benchConfig) (*result, error) {
	return func(ctx context.Context, cfg benchConfig) (*result, error) { return benchSL(ctx, cfg, f, subj) }
}

const (
	slTags        = 16
	slTagInterval = 100 * time.Millisecond
)

// slFault is one scenario's levels and fault.
type slFault struct {
	levels [2]byte
	// standbyFlag: the standby's level is --standby-level's, not
	// levels[1]: the scenario's verdict must not depend on it.
	standbyFlag bool
	hit         slHit // nil: no fault but the connect (fromFirstSample)
	// noSwitch: the scenario must not switch; measure the recovery on the
	// primary instead.
	noSwitch bool
	// watch: the scenario must not switch and has nothing to time; the
	// run is watched until its script is over (a switch's control).
	watch bool
	// stays: report the Policy's decisions to stay (a probe that found
	// the standby wanting), which show that the script's order of events
	// was the one the Pair saw.
	stays bool
	// fromFirstSample measures from the subject's first ServiceLevel
	// sample, and the fault is the connect itself.
	fromFirstSample bool
	// embeddedOnly: the fault needs uaserver's server.
	embeddedOnly bool
}

// switching reports whether the scenario must switch to the backup.
func (f slFault) switching() bool { return !f.noSwitch && !f.watch }

// slHit injects a fault and returns a channel closed when the scenario's
// own script is over (the stopped server is down). It may block while the
// script runs; rec is for what the script must note (the standby's rise).
type slHit func(ctx context.Context, t slTarget, cfg benchConfig, rec *slRecorder) (<-chan struct{}, error)

// slNow is a fault that is over once injected.
func slNow(f func(slTarget)) slHit {
	return func(_ context.Context, t slTarget, _ benchConfig, _ *slRecorder) (<-chan struct{}, error) {
		f(t)
		return closed(), nil
	}
}

func closed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

var (
	slGracefulStop = slFault{levels: [2]byte{250, 90}, hit: func(_ context.Context, t slTarget, _ benchConfig, _ *slRecorder) (<-chan struct{}, error) {
		return t.gracefulStop(), nil
	}}
	slHardKill = slFault{levels: [2]byte{250, 240}, hit: slNow(slTarget.kill)}
	slFreeze   = slFault{levels: [2]byte{250, 240}, hit: slNow(slTarget.freeze)}
	slBlip     = slFault{levels: [2]byte{250, 90}, standbyFlag: true, noSwitch: true, hit: blipHit}
	slLongBlip = slFault{levels: [2]byte{250, 90}, standbyFlag: true, noSwitch: true, embeddedOnly: true,
		hit: slNow(func(t slTarget) { t.(*embeddedTarget).p.A().ForgetSessions(false) })}
	slConnectStandby = slFault{levels: [2]byte{90, 250}, fromFirstSample: true}
)

// blipHit resets the primary's connections, or with --blip freezes its
// link that long and heals it; the channel closes when the link is back.
func blipHit(_ context.Context, t slTarget, cfg benchConfig, _ *slRecorder) (<-chan struct{}, error) {
	if cfg.blip == 0 {
		t.resetConns()
		return closed(), nil
	}
	t.freeze()
	done := make(chan struct{})
	time.AfterFunc(cfg.blip, func() {
		t.heal()
		close(done)
	})
	return done, nil
}

// slSubject is the client under test: a Pair, or the poll-based client
// of the original ServiceLevel design.
type slSubject func(ctx context.Context, t slTarget, cfg benchConfig, rec *slRecorder) (stop func(), err error)

// pairSubject is uaclient.Pair with its defaults, except a queue of 10
// per item so that no tick is lost to OPC UA's sampling in steady state.
func pairSubject(ctx context.Context, t slTarget, cfg benchConfig, rec *slRecorder) (func(), error) {
	pc := uaclient.PairConfig{Endpoints: t.endpoints(), QueueSize: new(10), Mode: cfg.mode}
	if cfg.server == serverNode {
		// node-opcua samples its counter on a timer of its own: sampled
		// at the counter's 100 ms, a tick is now and then missed in steady
		// state, which no blip caused.
		pc.SamplingIntervalMilliseconds = new(25)
		if cfg.tags > 1000 {
			// node-opcua serves one request at a time: creating or
			// reading thousands of items stalls its answers, the
			// health subscription's and the ServiceLevel reads' too,
			// for longer than the defaults allow (600 ms, 500 ms).
			pc.HeartbeatTimeoutMilliseconds = new(3000)
			pc.ReadTimeoutMilliseconds = new(3000)
		}
	}
	sp, err := uaclient.NewPair(pc,
		uaclient.WithLogger(cfg.log),
		uaclient.WithDataHandler(func(u uaclient.Update) {
			switch u.Kind {
			case uaclient.UpdateData, uaclient.UpdateRefreshValue:
				rec.value(u.Endpoint, u.Handle, u.Value, u.Kind == uaclient.UpdateRefreshValue)
			case uaclient.UpdateRefreshEnd:
				rec.refreshDone(u.Endpoint)
			}
		}),
		uaclient.WithEventHandler(func(e uaclient.Event) {
			switch {
			case e.Kind == uaclient.EventFailover:
				rec.failover(e.Cause.String())
			case e.Kind == uaclient.EventLinkRecovered:
				rec.linkRecovered(e.Republished)
			case e.Kind == uaclient.EventStay:
				rec.stay()
			case e.Kind == uaclient.EventSessionLost && e.Endpoint == servicelevel.Primary:
				rec.linkLost()
			case e.Kind == uaclient.EventLevelChanged && e.Role == uaclient.RoleActive && e.Endpoint == servicelevel.Primary:
				rec.sample()
			}
		}))
	if err != nil {
		return nil, err
	}
	if _, err := sp.AddItems(ctx, t.items()); err != nil {
		sp.Close()
		return nil, err
	}
	if err := sp.Start(ctx); err != nil {
		sp.Close()
		return nil, err
	}
	if err := sp.WaitReady(ctx); err != nil {
		sp.Close()
		return nil, err
	}
	return sp.Close, nil
}

func startSLCluster(ctx context.Context, cfg benchConfig) (*uaserver.Pair, error) {
	opts := []uaserver.Option{uaserver.WithTags(cmp.Or(cfg.tags, slTags)), uaserver.WithTagInterval(slTagInterval)}
	if cfg.rtt > 0 {
		opts = append(opts, uaserver.WithClientRTT(cfg.rtt))
	}
	return uaserver.StartPair(ctx, opts...)
}

// benchSL runs one fault against one subject cfg.runs times.
func benchSL(ctx context.Context, cfg benchConfig, f slFault, subj slSubject) (*result, error) {
	if f.embeddedOnly && cfg.server == serverNode {
		return nil, fmt.Errorf("this scenario runs on the embedded servers only (--server %s)", serverEmbedded)
	}
	t, err := startSLTarget(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer t.close()
	r := &result{}
	causes := map[string]int{}
	var outOfOrder, bad uint64
	var recovers, refreshes, afterRise []float64
	recoveries, republished, stays := 0, 0, 0
	for run := 1; run <= cfg.runs; run++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		o, err := slOnce(ctx, t, cfg, f, subj)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		r.Runs++
		if o.dur > 0 && !f.noSwitch {
			r.addSwitch(o.dur)
		}
		if f.noSwitch {
			recovers = append(recovers, ms(o.dur))
		}
		r.MaxGap = max(r.MaxGap, ms(o.gap))
		r.Lost += o.lost
		r.Duplicated += o.dup
		outOfOrder += o.outOfOrder
		bad += o.bad
		if o.refresh > 0 {
			refreshes = append(refreshes, ms(o.refresh))
		}
		for c, n := range o.causes {
			causes[c] += n
		}
		recoveries += o.recoveries
		republished += o.republished
		if o.afterRise > 0 {
			afterRise = append(afterRise, ms(o.afterRise))
		}
		stays += o.stays
		fmt.Fprintf(cfg.progress, "  run %d: %.3f ms, switches %d (%s), max gap %.3f ms, lost %d, dup %d, out of order %d, bad %d, recovered %d, republished %d%s\n",
			run, ms(o.dur), total(o.causes), causeList(o.causes), ms(o.gap), o.lost, o.dup, o.outOfOrder, o.bad, o.recoveries, o.republished, o.peerNote(f))
	}
	if f.noSwitch {
		r.set("recoveries", recoveries)
		r.set("republished", republished)
	}
	sw := total(causes)
	r.set("switches", sw)
	r.set("out_of_order", outOfOrder)
	r.set("bad_samples", bad)
	if len(refreshes) > 0 {
		r.set("refresh_ms_p50", percentile(refreshes, 50))
		r.set("refresh_ms_p99", percentile(refreshes, 99))
	}
	r.set("server", cmp.Or(cfg.server, serverEmbedded))
	r.set("tags", cmp.Or(cfg.tags, slTags))
	r.set("mode", string(cmp.Or(cfg.mode, uaclient.ModeWarm)))
	if f.switching() || sw > 0 {
		r.set("cause", causeList(causes))
	}
	if f.standbyFlag {
		r.set("standby_level", cfg.standbyLevel)
	}
	if f.stays {
		setPeerFields(r, cfg, f, afterRise, stays)
	}
	if len(recovers) > 0 {
		r.set("recover_ms_p50", percentile(recovers, 50))
		r.set("recover_ms_p99", percentile(recovers, 99))
		r.set("recover_ms_max", slices.Max(recovers))
	}
	r.set("rtt_ms", ms(cfg.rtt))
	return r, nil
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func causeList(m map[string]int) string {
	var parts []string
	for c, n := range m {
		parts = append(parts, fmt.Sprintf("%s x%d", c, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

type slOutcome struct {
	dur             time.Duration
	refresh         time.Duration // from the fault to the end of the new server's snapshot; 0 if none
	gap             time.Duration
	lost, dup       uint64
	outOfOrder, bad uint64
	causes          map[string]int
	recoveries      int
	republished     int
	afterRise       time.Duration // from the standby's rise to the first Good value from it; 0 if no rise
	stays           int           // the Policy's decisions to stay after the fault
}

func slOnce(ctx context.Context, t slTarget, cfg benchConfig, f slFault, subj slSubject) (slOutcome, error) {
	var o slOutcome
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	levels := f.levels
	if f.standbyFlag {
		levels[1] = byte(cfg.standbyLevel)
	}
	if err := t.reset(rctx, levels); err != nil {
		return o, err
	}
	rec := t.recorder()
	if !f.switching() {
		// One server all along: its counters say what was lost, on any
		// server.
		rec.independent = false
	}
	if f.fromFirstSample {
		rec.setMark(time.Now()) // the connect is the fault
	}
	stop, err := subj(rctx, t, cfg, rec)
	if err != nil {
		return o, err
	}
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	var start time.Time
	if f.fromFirstSample {
		if start, err = rec.waitFirstSample(rctx); err != nil {
			return o, err
		}
	} else {
		// A random phase against the subjects' polls and heartbeats.
		if err := ctxtime.Sleep(rctx, 500*time.Millisecond+rand.N(2*time.Second)); err != nil {
			return o, err
		}
		start = time.Now()
		rec.setMark(start)
		rec.mu.Lock()
		rec.gapFrom = start.Add(-time.Second)
		rec.mu.Unlock()
	}
	down := closed()
	if f.hit != nil {
		if down, err = f.hit(rctx, t, cfg, rec); err != nil {
			return o, err
		}
	}
	// A switch ends with the first Good value from the backup; a blip
	// with the primary's recovery, or its snapshot after a new session; a
	// watched run has nothing to wait for beyond its script.
	want := servicelevel.Backup
	var at time.Time
	switch {
	case f.watch:
		want = servicelevel.Primary
	case f.noSwitch:
		want = servicelevel.Primary
		at, err = rec.waitBack(rctx, down)
	default:
		at, err = rec.waitGood(rctx, want, false)
	}
	if err != nil {
		return o, err
	}
	if !at.IsZero() {
		o.dur = at.Sub(start)
	}
	rec.mu.Lock()
	refreshing := rec.framed
	if !rec.rise.IsZero() && !at.IsZero() {
		o.afterRise = at.Sub(rec.rise)
	}
	rec.mu.Unlock()
	if f.switching() && refreshing {
		// The refresh that the switch began (the poll-based client of
		// the original design frames none) ends when consumers are whole
		// again (refresh_ms): at thousands of tags that can come after
		// the settle time below.
		if err := rec.await(rctx, func() bool { return !rec.refreshEnd[want].IsZero() }); err != nil {
			return o, fmt.Errorf("the %s's snapshot did not end: %w", want, err)
		}
	}
	// Let the scenario play out (the stopped server goes down), then a
	// little longer: what happens after the switch counts too.
	select {
	case <-down:
	case <-rctx.Done():
		return o, rctx.Err()
	}
	settle := 500 * time.Millisecond // a watched run's script was its watch
	if f.noSwitch {
		settle = 2 * time.Second // long enough for a wrong switch to show
	}
	if err := ctxtime.Sleep(rctx, settle); err != nil {
		return o, err
	}
	end := time.Now()
	stop()
	stop = nil
	rec.mu.Lock()
	defer rec.mu.Unlock()
	o.gap, o.lost, o.dup = rec.maxGap, rec.lost, rec.dup
	if f.watch && !rec.lastGood.Before(rec.gapFrom) {
		// A watched run can end in silence (the control's consumer gets
		// no Good value after the 0): a gap still open counts too.
		o.gap = max(o.gap, end.Sub(rec.lastGood))
	}
	if end := rec.refreshEnd[want]; !end.IsZero() && f.switching() {
		o.refresh = end.Sub(start)
	}
	o.outOfOrder, o.bad = rec.outOfOrder, rec.bad
	o.causes = maps.Clone(rec.causes)
	o.recoveries, o.republished = rec.recoveries, rec.republished
	o.stays = rec.stays
	return o, nil
}

// benchSLHealthy runs cfg.runs Pairs side by side on a healthy 250/240 pair
// for cfg.duration: none may switch.
func benchSLHealthy(ctx context.Context, cfg benchConfig) (*result, error) {
	if cfg.server == serverNode {
		return nil, fmt.Errorf("sl-healthy-pair runs on the embedded servers only (--server %s)", serverEmbedded)
	}
	p, err := startSLCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	t := &embeddedTarget{p: p}
	recs := make([]*slRecorder, cfg.runs)
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	for i := range recs {
		recs[i] = t.recorder()
		recs[i].gapFrom = start
		stop, err := pairSubject(sctx, t, cfg, recs[i])
		if err != nil {
			return nil, fmt.Errorf("pair %d: %w", i+1, err)
		}
		stops = append(stops, stop)
	}
	fmt.Fprintf(cfg.progress, "  %d pairs up, watching for %v\n", cfg.runs, cfg.duration)
	if err := ctxtime.Sleep(ctx, cfg.duration); err != nil {
		return nil, err
	}
	r := &result{Runs: cfg.runs}
	causes := map[string]int{}
	var outOfOrder, bad uint64
	for i, rec := range recs {
		rec.mu.Lock()
		r.Lost += rec.lost
		r.Duplicated += rec.dup
		outOfOrder += rec.outOfOrder
		bad += rec.bad
		r.MaxGap = max(r.MaxGap, ms(rec.maxGap))
		for c, n := range rec.causes {
			causes[c] += n
		}
		fmt.Fprintf(cfg.progress, "  pair %d: switches %d, max gap %.3f ms, lost %d, dup %d\n", i+1, rec.switches, ms(rec.maxGap), rec.lost, rec.dup)
		rec.mu.Unlock()
	}
	sw := total(causes)
	r.set("switches", sw)
	r.set("out_of_order", outOfOrder)
	r.set("bad_samples", bad)
	r.set("server", cmp.Or(cfg.server, serverEmbedded))
	r.set("tags", cmp.Or(cfg.tags, slTags))
	r.set("mode", string(cmp.Or(cfg.mode, uaclient.ModeWarm)))
	if sw > 0 {
		r.set("cause", causeList(causes))
	}
	r.set("duration_s", cfg.duration.Seconds())
	return r, nil
}
