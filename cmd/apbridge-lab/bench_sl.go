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
	"sync"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua/ua"
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
		{"sl-blip", "pair 250/240: the primary's connection is reset once, the server stays up (must not switch, must lose nothing)", slRun(slBlip, pairSubject)},
		{"sl-long-blip", "pair 250/240: a blip longer than the session timeout: the primary's server forgets the session and its subscriptions, then the connection is reset (must not switch; the loss is counted)", slRun(slLongBlip, pairSubject)},
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
	// hit injects the fault and returns a channel closed when the
	// scenario's own script is over (the stopped server is down).
	hit func(t slTarget, cfg benchConfig) <-chan struct{}
	// noSwitch: the scenario must not switch; measure the recovery on the
	// primary instead.
	noSwitch bool
	// fromFirstSample measures from the subject's first ServiceLevel
	// sample, and the fault is the connect itself.
	fromFirstSample bool
	// embeddedOnly: the fault needs uaserver's server.
	embeddedOnly bool
}

func closed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

var (
	slGracefulStop = slFault{levels: [2]byte{250, 90}, hit: func(t slTarget, _ benchConfig) <-chan struct{} { return t.gracefulStop() }}
	slHardKill     = slFault{levels: [2]byte{250, 240}, hit: func(t slTarget, _ benchConfig) <-chan struct{} { t.kill(); return closed() }}
	slFreeze       = slFault{levels: [2]byte{250, 240}, hit: func(t slTarget, _ benchConfig) <-chan struct{} { t.freeze(); return closed() }}
	slBlip         = slFault{levels: [2]byte{250, 240}, noSwitch: true, hit: blipHit}
	slLongBlip     = slFault{levels: [2]byte{250, 240}, noSwitch: true, embeddedOnly: true,
		hit: func(t slTarget, _ benchConfig) <-chan struct{} {
			t.(*embeddedTarget).p.A().ForgetSessions(false)
			return closed()
		}}
	slConnectStandby = slFault{levels: [2]byte{90, 250}, fromFirstSample: true}
)

// blipHit resets the primary's connections, or with --blip freezes its
// link that long and heals it; the channel closes when the link is back.
func blipHit(t slTarget, cfg benchConfig) <-chan struct{} {
	if cfg.blip == 0 {
		t.resetConns()
		return closed()
	}
	t.freeze()
	done := make(chan struct{})
	time.AfterFunc(cfg.blip, func() {
		t.heal()
		close(done)
	})
	return done
}

// slRecorder is the consumer: it checks the counters for lost and
// repeated ticks, and notes when Good values arrive from each endpoint.
type slRecorder struct {
	mu       sync.Mutex
	counters map[uint32]bool
	// independent: the two servers count on their own, so a counter's
	// value says nothing about lost or repeated ticks across a switch.
	independent bool
	last        map[uint32]int64
	lastSt      map[uint32]ua.StatusCode
	lost        uint64
	dup         uint64
	// outOfOrder counts data changes older in source time than the tag's
	// last one; bad counts the counters' values that were not Good.
	lastSrc    map[uint32]time.Time
	outOfOrder uint64
	bad        uint64
	// Good values of tag 0 (a counter) for the gap.
	lastGood, gapFrom time.Time
	maxGap            time.Duration
	// The first Good value from each endpoint after mark.
	mark         time.Time
	firstGood    [2]time.Time
	firstRefresh [2]time.Time // the first Good value of a snapshot
	refreshEnd   [2]time.Time // the end of the first snapshot after mark
	framed       bool         // the subject frames snapshots (refresh ends); the poll-based client does not
	// The first ServiceLevel sample of the primary.
	firstSample time.Time
	switches    int
	causes      map[string]int
	// recovered is when the primary's link recovered after the mark
	// (uaclient.EventLinkRecovered); republished sums what the
	// recoveries asked the server for again.
	recovered   time.Time
	recoveries  int
	republished int
	lostLinks   int // the primary's sessions lost after the mark
	changed     chan struct{}
	// counterValues counts the counter values each endpoint delivered.
	counterValues [2]int
}

func newSLRecorder(tags []uaserver.Tag) *slRecorder {
	r := &slRecorder{counters: map[uint32]bool{}, last: map[uint32]int64{}, lastSt: map[uint32]ua.StatusCode{},
		lastSrc: map[uint32]time.Time{}, causes: map[string]int{}, changed: make(chan struct{}, 1)}
	for i, t := range tags {
		if t.Kind == uaserver.TagCounter {
			r.counters[uint32(i)] = true
		}
	}
	return r
}

func (r *slRecorder) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// value records one value; refresh values reconcile (a value already seen
// is not a duplicate), data changes must each be new: an older tick, or the
// same tick with the same status again, is a duplicate (the same tick with
// another status is a status change, as when a server turns its data
// Bad_OutOfService).
func (r *slRecorder) value(ep servicelevel.Endpoint, h uint32, dv *ua.DataValue, refresh bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	good := dv != nil && dv.Status == ua.StatusOK
	if good && !r.mark.IsZero() && now.After(r.mark) {
		if r.firstGood[ep].IsZero() {
			r.firstGood[ep] = now
		}
		if refresh && r.firstRefresh[ep].IsZero() {
			r.firstRefresh[ep] = now
		}
	}
	if h == 0 && good {
		if !r.lastGood.IsZero() && now.Sub(r.lastGood) > r.maxGap && !r.lastGood.Before(r.gapFrom) {
			r.maxGap = now.Sub(r.lastGood)
		}
		r.lastGood = now
	}
	if dv != nil && !dv.SourceTimestamp.IsZero() {
		// A snapshot may repeat an older value; a data change may not.
		if last := r.lastSrc[h]; !refresh && dv.SourceTimestamp.Before(last) {
			r.outOfOrder++
		}
		if dv.SourceTimestamp.After(r.lastSrc[h]) {
			r.lastSrc[h] = dv.SourceTimestamp
		}
	}
	if r.counters[h] && dv != nil && !good {
		r.bad++
	}
	if r.counters[h] && !r.independent && dv != nil && dv.Value != nil {
		if v, ok := uaCounter(dv.Value.Value()); ok {
			r.counterValues[ep]++
			last, seen := r.last[h]
			switch {
			case !seen:
			case v > last+1:
				r.lost += uint64(v - last - 1)
			case !refresh && (v < last || v == last && dv.Status == r.lastSt[h]):
				r.dup++
			}
			if !seen || v >= last {
				r.last[h], r.lastSt[h] = v, dv.Status
			}
		}
	}
	r.poke()
}

// uaCounter returns a counter's value: an Int64 on uaserver's
// servers, an Int32 on node-opcua's.
func uaCounter(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	}
	return 0, false
}

// refreshDone notes the end of a snapshot of ep: every tag's value is
// with the consumer again.
func (r *slRecorder) refreshDone(ep servicelevel.Endpoint) {
	now := time.Now()
	r.mu.Lock()
	r.framed = true
	if !r.mark.IsZero() && now.After(r.mark) && r.refreshEnd[ep].IsZero() {
		r.refreshEnd[ep] = now
	}
	r.mu.Unlock()
	r.poke()
}

func (r *slRecorder) failover(cause string) {
	r.mu.Lock()
	r.switches++
	r.causes[cause]++
	r.mu.Unlock()
	r.poke()
}

func (r *slRecorder) linkLost() {
	r.mu.Lock()
	if !r.mark.IsZero() && time.Now().After(r.mark) {
		r.lostLinks++
	}
	r.mu.Unlock()
	r.poke()
}

func (r *slRecorder) linkRecovered(republished int) {
	now := time.Now()
	r.mu.Lock()
	if !r.mark.IsZero() && now.After(r.mark) && r.recovered.IsZero() {
		r.recovered = now
	}
	r.recoveries++
	r.republished += republished
	r.mu.Unlock()
	r.poke()
}

// waitBack waits until the primary carries the data again after the
// mark: its link recovered, or a snapshot from a new session. A link that
// is back (down closed) without having been lost (a freeze shorter than
// the heartbeat gap) counts from when it was back, once a second has shown
// that no loss follows.
func (r *slRecorder) waitBack(ctx context.Context, down <-chan struct{}) (time.Time, error) {
	var at, back time.Time
	err := r.await(ctx, func() bool {
		if back.IsZero() {
			select {
			case <-down:
				back = time.Now()
			default:
			}
		}
		if !back.IsZero() && r.lostLinks == 0 && time.Since(back) > time.Second {
			at = back
			return true
		}
		at = r.recovered
		if f := r.firstRefresh[servicelevel.Primary]; at.IsZero() || !f.IsZero() && f.Before(at) {
			at = f
		}
		if at.IsZero() && r.switches > 0 {
			at = time.Now() // a switch: the switches column says so
		}
		return !at.IsZero()
	})
	if err != nil {
		return at, fmt.Errorf("the primary did not come back: %w", err)
	}
	return at, nil
}

func (r *slRecorder) sample() {
	r.mu.Lock()
	if r.firstSample.IsZero() {
		r.firstSample = time.Now()
	}
	r.mu.Unlock()
	r.poke()
}

func (r *slRecorder) setMark(t time.Time) {
	r.mu.Lock()
	r.mark = t
	r.firstGood = [2]time.Time{}
	r.firstRefresh = [2]time.Time{}
	r.refreshEnd = [2]time.Time{}
	r.mu.Unlock()
}

// await waits until done, called with r.mu held, reports true.
func (r *slRecorder) await(ctx context.Context, done func() bool) error {
	for {
		r.mu.Lock()
		ok := done()
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-r.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitGood waits for a Good value from ep after the mark, from a snapshot
// if refresh is set.
func (r *slRecorder) waitGood(ctx context.Context, ep servicelevel.Endpoint, refresh bool) (time.Time, error) {
	var at time.Time
	err := r.await(ctx, func() bool {
		at = r.firstGood[ep]
		if refresh {
			at = r.firstRefresh[ep]
		}
		return !at.IsZero()
	})
	if err != nil {
		return at, fmt.Errorf("no Good value from the %s: %w", ep, err)
	}
	return at, nil
}

func (r *slRecorder) waitFirstSample(ctx context.Context) (time.Time, error) {
	var at time.Time
	if err := r.await(ctx, func() bool { at = r.firstSample; return !at.IsZero() }); err != nil {
		return at, fmt.Errorf("no ServiceLevel sample: %w", err)
	}
	return at, nil
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
	var recovers, refreshes []float64
	recoveries, republished := 0, 0
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
		fmt.Fprintf(cfg.progress, "  run %d: %.3f ms, switches %d (%s), max gap %.3f ms, lost %d, dup %d, out of order %d, bad %d, recovered %d, republished %d\n",
			run, ms(o.dur), total(o.causes), causeList(o.causes), ms(o.gap), o.lost, o.dup, o.outOfOrder, o.bad, o.recoveries, o.republished)
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
	if !f.noSwitch || sw > 0 {
		r.set("cause", causeList(causes))
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
}

func slOnce(ctx context.Context, t slTarget, cfg benchConfig, f slFault, subj slSubject) (slOutcome, error) {
	var o slOutcome
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := t.reset(rctx, f.levels); err != nil {
		return o, err
	}
	rec := t.recorder()
	if f.noSwitch {
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
		down = f.hit(t, cfg)
	}
	// A switch ends with the first Good value from the backup; a blip
	// with the primary's recovery, or its snapshot after a new session.
	want := servicelevel.Backup
	var at time.Time
	if f.noSwitch {
		want = servicelevel.Primary
		at, err = rec.waitBack(rctx, down)
	} else {
		at, err = rec.waitGood(rctx, want, false)
	}
	if err != nil {
		return o, err
	}
	o.dur = at.Sub(start)
	rec.mu.Lock()
	refreshing := rec.framed
	rec.mu.Unlock()
	if !f.noSwitch && refreshing {
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
	settle := 500 * time.Millisecond
	if f.noSwitch {
		settle = 2 * time.Second // long enough for a wrong switch to show
	}
	if err := ctxtime.Sleep(rctx, settle); err != nil {
		return o, err
	}
	stop()
	stop = nil
	rec.mu.Lock()
	defer rec.mu.Unlock()
	o.gap, o.lost, o.dup = rec.maxGap, rec.lost, rec.dup
	if end := rec.refreshEnd[want]; !end.IsZero() && !f.noSwitch {
		o.refresh = end.Sub(start)
	}
	o.outOfOrder, o.bad = rec.outOfOrder, rec.bad
	o.causes = maps.Clone(rec.causes)
	o.recoveries, o.republished = rec.recoveries, rec.republished
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
