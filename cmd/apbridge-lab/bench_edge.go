package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/edge"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// The edge load: 1,000 tags at 10 Hz, the rate of a plant's historian
// feed, stored at the site and sourced by the hub.
const (
	edgeTags   = 1000
	edgePeriod = 100 * time.Millisecond
	// edgeFlapCut and edgeFlapUp are the flapping link's rhythm.
	edgeFlapCut = 5 * time.Second
	edgeFlapUp  = 5 * time.Second
	// edgeLeafCompression is how the site's servers compress what they
	// send the hub, as docs/edge.md configures them: s2_fast, not
	// nats-server's s2_auto, which moves to s2_best when the catch-up's
	// load stretches the leaf connection's round trip past 100 ms, and
	// then takes the site's cores for compressing the backlog.
	edgeLeafCompression = "s2_fast"
	// edgeMaxPending is the site relay's publishing window: 3.3 s of the
	// site's traffic, so that the slower acknowledgements of a site
	// whose servers also serve the hub's catch-up do not hold the
	// source (the default 4,096 is 0.4 s of it). docs/edge.md.
	edgeMaxPending = 32768
)

// WAN faults of --wan.
const (
	wanCut    = "cut"
	wanFreeze = "freeze"
	// wanNone keeps the WAN up through the outage's phase: the control
	// run, which shows what the site's relay sees over the same time
	// without an outage, so that what the outage adds can be told apart
	// from what a growing stream and duplicate window cost the site.
	wanNone = "none"
)

// wanPlan is what happens to the WAN (and the site) in one scenario.
type wanPlan struct {
	// ldm puts the site node under the relay's active connection in
	// lame-duck mode a third into the outage, and restarts it.
	ldm bool
	// flap cuts the link edgeFlapCut, then heals it edgeFlapUp, for
	// cfg.flap.
	flap bool
}

func edgeScenarios() []scenario {
	return []scenario{
		{"wan-outage", "edge site: 1,000 tags at 10 Hz into the site stream, the WAN cut (--wan cut|freeze) for --outage, then healed; audited at the hub stream",
			func(ctx context.Context, cfg benchConfig) (*result, error) { return benchWAN(ctx, cfg, wanPlan{}) }},
		{"wan-outage-ldm", "wan-outage with the site node under the relay's active connection in lame-duck mode (and restarted) during the outage",
			func(ctx context.Context, cfg benchConfig) (*result, error) {
				return benchWAN(ctx, cfg, wanPlan{ldm: true})
			}},
		{"wan-flap", "edge site: the WAN cut 5 s, up 5 s, for --flap; audited at the hub stream",
			func(ctx context.Context, cfg benchConfig) (*result, error) {
				return benchWAN(ctx, cfg, wanPlan{flap: true})
			}},
	}
}

// wanRun is one run's figures.
type wanRun struct {
	audit natstest.StreamAudit
	// backlog is what the hub lacked at the heal, catchup how long it
	// took to have it.
	backlog uint64
	catchup time.Duration
	// silence is the longest time the site stream acknowledged nothing
	// from the relay; blocked how often the relay was held by a full
	// window; timeouts its publishes not acknowledged in time.
	silence [phases]time.Duration
	// waited is the longest an update waited in the relay's sink for the
	// site's acknowledgement: what the relay noticed of the site, without
	// the source's own lateness that a silence includes.
	waited [phases]time.Duration
	// long counts the silences longer than edgeLongSilence: a silence
	// beyond one publishing interval is a rare event, and how often it
	// comes tells a phase that has one from a phase made of them.
	long     [phases]int
	blocked  [phases]uint64
	timeouts uint64
	switches uint64
	// hubGained is what the hub stream gained while the WAN was down,
	// after the first second: 0 when the outage was real.
	hubGained uint64
	// report is the relay's edge check after the catch-up.
	report edge.Report
}

// benchWAN runs an edge site (hub cluster of 3, site leaf cluster of 3,
// R3 streams on both) cfg.runs times with plan.
func benchWAN(ctx context.Context, cfg benchConfig, plan wanPlan) (*result, error) {
	e, err := startWANWorld(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if cfg.wanRTT > 0 {
		if err := e.link.slow(cfg.wanRTT / 2); err != nil {
			return nil, err
		}
	}
	var tot jsTotals
	var catchups, rates []float64
	var silences, waits [phases][]float64
	var long [phases][]int
	var blocked [phases]uint64
	var timeouts, switches, gained, backlog uint64
	for run := 1; run <= cfg.runs; run++ {
		w, err := wanOnce(ctx, e, cfg, plan, run)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		tot.add(w.audit)
		rate := float64(w.backlog) / w.catchup.Seconds()
		catchups = append(catchups, round3(w.catchup.Seconds()))
		rates = append(rates, round0(rate))
		for p := range phases {
			silences[p] = append(silences[p], ms(w.silence[p]))
			waits[p] = append(waits[p], ms(w.waited[p]))
			long[p] = append(long[p], w.long[p])
			blocked[p] += w.blocked[p]
		}
		timeouts += w.timeouts
		switches += w.switches
		gained += w.hubGained
		backlog += w.backlog
		fmt.Fprintf(cfg.progress, "  run %d: %d updates, %d at the hub: lost %d, duplicated %d, out of order %d; backlog %d caught up in %.1f s (%.0f/s); site silence ms (steady/outage/catch-up/after) %v, silences over %v %v, longest wait for an ack ms %v, held %v times, switches %d; edge check: absorb %v (%s), fill %.3f\n",
			run, w.audit.Expected, w.audit.Stored, w.audit.Lost, w.audit.Duplicated, w.audit.OutOfOrder, w.backlog, w.catchup.Seconds(), rate,
			silenceMs(w.silence), edgeLongSilence, w.long, silenceMs(w.waited), w.blocked, w.switches, w.report.Absorb.Round(time.Second), w.report.AbsorbLimit, w.report.Site.FillBytes)
	}
	r := tot.result(cfg.runs)
	r.set("reordered", tot.reordered)
	r.set("source", fmt.Sprintf("SimSource, %d tags every %v (%d updates/s)", edgeTags, edgePeriod, edgeTags*int(time.Second/edgePeriod)))
	if plan.flap {
		r.set("flap_s", cfg.flap.Seconds())
	} else {
		r.set("outage_s", cfg.outage.Seconds())
		r.set("wan_fault", cfg.wan)
	}
	r.set("wan_rtt_ms", ms(cfg.wanRTT))
	r.set("hub", cfg.hub)
	r.set("site", cfg.site)
	if cfg.hub == hubProcess {
		r.set("hub_nice", cfg.hubNice)
	}
	r.set("catchup_rate_bps", cfg.catchupRate)
	r.set("dup_window_s", cfg.dupWindow.Seconds())
	r.set("leaf_compression", cfg.leafCompression)
	r.set("backlog_at_heal", backlog/uint64(cfg.runs))
	r.set("catchup_s", catchups)
	r.set("catchup_per_s", rates)
	r.set("catchup_per_s_min", slices.Min(rates))
	// The site must not notice the outage: its silences and holds in the
	// outage phase against the steady phase before it.
	for p := range phases {
		r.set("site_silence_ms_"+phaseNames[p], silences[p])
		r.set("site_ack_wait_ms_"+phaseNames[p], waits[p])
		r.set("site_long_silences_"+phaseNames[p], long[p])
		r.set("site_blocked_"+phaseNames[p], blocked[p])
	}
	r.MaxGap = slices.Max(silences[phaseOutage])
	r.set("site_silence_ms", r.MaxGap)
	r.set("site_ack_wait_ms", slices.Max(waits[phaseOutage]))
	r.set("site_ack_timeouts", timeouts)
	r.set("site_switches", switches)
	r.set("hub_gained_during_outage", gained)
	return r, nil
}

func silenceMs(d [phases]time.Duration) [phases]float64 {
	var out [phases]float64
	for i, x := range d {
		out[i] = round0(ms(x))
	}
	return out
}

// streamCounter reads a stream's message count and last sequence on a
// connection of its own.
type streamCounter struct {
	nc     *nats.Conn
	stream jetstream.Stream
}

func newStreamCounter(ctx context.Context, urls []string, opts []nats.Option, name string) (*streamCounter, error) {
	nc, err := nats.Connect(strings.Join(urls, ","), append(opts, nats.MaxReconnects(-1))...)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	// A cluster busy placing a stream can answer "no responders" for a
	// moment: ask again for a while.
	var s jetstream.Stream
	for try := 0; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err = js.Stream(rctx, name)
		cancel()
		if err == nil {
			return &streamCounter{nc: nc, stream: s}, nil
		}
		if try == 50 {
			nc.Close()
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		if cerr := ctxtime.Sleep(ctx, 200*time.Millisecond); cerr != nil {
			nc.Close()
			return nil, cerr
		}
	}
}

// state returns the message count and last sequence, retrying for a
// while: a node restarted a moment ago may not answer yet.
func (c *streamCounter) state(ctx context.Context) (msgs, last uint64, err error) {
	for range 50 {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, ierr := c.stream.Info(rctx)
		cancel()
		if ierr == nil {
			return info.State.Msgs, info.State.LastSeq, nil
		}
		err = ierr
		if cerr := ctxtime.Sleep(ctx, 100*time.Millisecond); cerr != nil {
			return 0, 0, cerr
		}
	}
	return 0, 0, fmt.Errorf("state of stream %s: %w", c.stream.CachedInfo().Config.Name, err)
}

func (c *streamCounter) close() { c.nc.Close() }

// logSource logs (at debug level) the stream's messages and its first
// source's lag and last activity: when the hub resumed sourcing after a
// heal, and how fast it goes.
func (c *streamCounter) logSource(ctx context.Context, log zerolog.Logger, msgs uint64) {
	if log.GetLevel() > zerolog.DebugLevel {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.stream.Info(rctx)
	if err != nil || len(info.Sources) == 0 {
		return
	}
	src := info.Sources[0]
	ev := log.Debug().Str("at", time.Now().Format(edgeClock)).Uint64("msgs", msgs).Uint64("lag", src.Lag).Dur("source_active_ms", src.Active)
	if src.Error != nil {
		ev = ev.Str("source_error", src.Error.Error())
	}
	ev.Msg("hub catching up")
}

// Phases of a run, for the site's silence and backpressure.
const (
	phaseSteady  = iota // before the outage
	phaseOutage         // the WAN down (or flapping)
	phaseCatchup        // from the heal until the hub has the backlog
	phaseAfter          // the rest of the run
	phases
)

var phaseNames = [phases]string{"steady", "outage", "catchup", "after"}

// silenceWatch measures, phase by phase, the longest time the sink
// acknowledged nothing, the longest an update waited in it for its
// acknowledgement, and how often it held the source (a full window),
// polling its counters every 2 ms. Each silence longer than
// edgeLongSilence is counted, and logged (at debug level: --v) with its
// start, for finding what the site waited for.
type silenceWatch struct {
	sink    *jetstreamsink.Sink
	log     zerolog.Logger
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	phase   int
	longest [phases]time.Duration
	waited  [phases]time.Duration
	long    [phases]int
	blocked [phases]uint64
	mark    uint64 // Blocked at the start of the phase
}

// edgeClock is the time of day to the millisecond, in the debug log.
const edgeClock = "15:04:05.000"

// edgeLongSilence is one publishing interval and a half: a silence
// longer than that is counted, and logged with -v.
const edgeLongSilence = edgePeriod * 3 / 2

func watchSilence(s *jetstreamsink.Sink, log zerolog.Logger) *silenceWatch {
	w := &silenceWatch{sink: s, log: log, stop: make(chan struct{}), done: make(chan struct{}), mark: s.Stats().Blocked}
	go func() {
		defer close(w.done)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		last, since := s.Stats().Acked, time.Now()
		for {
			select {
			case <-w.stop:
				return
			case now := <-t.C:
				st := s.Stats()
				w.mu.Lock()
				w.waited[w.phase] = max(w.waited[w.phase], time.Duration(st.OldestPendingMs*float64(time.Millisecond)))
				w.mu.Unlock()
				if st.Acked != last {
					a, d := st.Acked, now.Sub(since)
					w.mu.Lock()
					w.longest[w.phase] = max(w.longest[w.phase], d)
					phase := w.phase
					if d > edgeLongSilence {
						w.long[phase]++
					}
					w.mu.Unlock()
					if d > edgeLongSilence {
						w.log.Debug().Str("phase", phaseNames[phase]).Str("from", since.Format(edgeClock)).Dur("silent_ms", d).
							Int("pending", st.Pending).Float64("oldest_pending_ms", st.OldestPendingMs).Bool("window_full", st.WindowFull).
							Msg("site silence")
					}
					last, since = a, now
				}
			}
		}
	}()
	return w
}

// next ends the current phase and starts p.
func (w *silenceWatch) next(p int) {
	b := w.sink.Stats().Blocked
	w.mu.Lock()
	w.blocked[w.phase] += b - w.mark
	w.phase, w.mark = p, b
	w.mu.Unlock()
}

// end stops the watch and returns the longest silence, the longest wait,
// the count of long silences and the holds of every phase.
func (w *silenceWatch) end() (silence, waited [phases]time.Duration, long [phases]int, blocked [phases]uint64) {
	w.next(phaseAfter)
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest, w.waited, w.long, w.blocked
}

func wanOnce(ctx context.Context, e *wanWorld, cfg benchConfig, plan wanPlan, run int) (wanRun, error) {
	var w wanRun
	siteStream, hubStream := "SITE"+strconv.Itoa(run), "PLANT"+strconv.Itoa(run)
	src := simsource.NewShared("site" + strconv.Itoa(run))
	defer src.Close()
	tags := make([]bridge.TagConfig, edgeTags)
	for i := range tags {
		tags[i] = bridge.TagConfig{Name: fmt.Sprintf("T%04d", i), Address: fmt.Sprintf("ns=1;s=T%04d", i)}
	}
	floor := max(cfg.outage, time.Minute)
	rcfg := &relay.Config{
		NATS: relay.NATSConfig{Servers: e.siteURLs()},
		SinkConfig: relay.SinkConfig{Sink: relay.SinkJetStream, JetStream: jetstreamsink.Config{
			Stream: siteStream, Domain: e.siteDomain, Replicas: 3, MaxBytes: 4 << 30, MaxPending: edgeMaxPending, DuplicateWindow: cfg.dupWindow,
		}},
		Edge: &edge.Config{Hub: edge.Hub{Domain: e.hubDomain, Stream: hubStream}, OutageFloor: floor, CheckInterval: 5 * time.Second},
	}
	view := src.Relay()
	rl, err := startEdgeRelay(ctx, rcfg, relay.WithLogger(cfg.log), relay.WithNATSOptions(e.siteOpts()...), relay.WithSource(view, tags))
	if err != nil {
		return w, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rl.Shutdown(sctx)
	}()
	sink := rl.JetStream()
	if err := e.sourceFromSite(ctx, hubStream, siteStream, cfg.catchupRate); err != nil {
		return w, fmt.Errorf("hub stream: %w", err)
	}
	defer e.deleteStreams(siteStream, hubStream)
	hub, err := newStreamCounter(ctx, e.hubURLs, e.hubOpts, hubStream)
	if err != nil {
		return w, err
	}
	defer hub.close()
	site, err := newStreamCounter(ctx, e.siteURLs(), e.siteOpts(), siteStream)
	if err != nil {
		return w, err
	}
	defer site.close()
	if err := waitCond(ctx, "tags subscribed", 30*time.Second, func() bool { return src.Sim().Subscribed() == edgeTags }); err != nil {
		return w, err
	}
	src.Sim().Run(edgePeriod)
	if err := waitCond(ctx, "the hub to source 3 s of updates", time.Minute, func() bool {
		n, _, _ := hub.state(ctx)
		return n >= 3*edgeTags*uint64(time.Second/edgePeriod)
	}); err != nil {
		return w, err
	}
	before := sink.Stats()
	watch := watchSilence(sink, cfg.log)
	// A steady phase to compare the outage with.
	if err := ctxtime.Sleep(ctx, 5*time.Second); err != nil {
		return w, err
	}
	watch.next(phaseOutage)

	// The outage.
	var afterFirst uint64
	down, heal := e.link.cut, e.link.heal
	switch cfg.wan {
	case wanFreeze:
		down = e.link.freeze
	case wanNone:
		down, heal = func() error { return nil }, func() error { return nil }
	}
	switch {
	case plan.flap:
		for end := time.Now().Add(cfg.flap); time.Now().Before(end); {
			if err := e.link.cut(); err != nil {
				return w, err
			}
			if err := ctxtime.Sleep(ctx, edgeFlapCut); err != nil {
				return w, err
			}
			if err := e.link.heal(); err != nil {
				return w, err
			}
			if err := ctxtime.Sleep(ctx, edgeFlapUp); err != nil {
				return w, err
			}
		}
		// The last cut, measured as the others are not: the hub's
		// catch-up after it.
		if err := e.link.cut(); err != nil {
			return w, err
		}
		if err := ctxtime.Sleep(ctx, time.Second); err != nil {
			return w, err
		}
		afterFirst, _, _ = hub.state(ctx)
		if err := ctxtime.Sleep(ctx, edgeFlapCut-time.Second); err != nil {
			return w, err
		}
	default:
		start := time.Now()
		cfg.log.Debug().Str("at", time.Now().Format(edgeClock)).Str("wan", cfg.wan).Msg("wan down")
		if err := down(); err != nil {
			return w, err
		}
		if err := ctxtime.Sleep(ctx, time.Second); err != nil {
			return w, err
		}
		afterFirst, _, _ = hub.state(ctx)
		if plan.ldm {
			if err := ctxtime.Sleep(ctx, cfg.outage/3); err != nil {
				return w, err
			}
			if err := ldmActiveNode(ctx, e, rl, siteStream); err != nil {
				return w, err
			}
		}
		if err := ctxtime.Sleep(ctx, time.Until(start.Add(cfg.outage))); err != nil {
			return w, err
		}
	}
	hubAt, _, err := hub.state(ctx)
	if err != nil {
		return w, err
	}
	w.hubGained = hubAt - afterFirst
	_, siteAt, err := site.state(ctx)
	if err != nil {
		return w, err
	}
	cfg.log.Debug().Str("at", time.Now().Format(edgeClock)).Uint64("backlog", siteAt-hubAt).Msg("wan healed")
	if err := heal(); err != nil {
		return w, err
	}
	watch.next(phaseCatchup)
	healed := time.Now()
	w.backlog = siteAt - hubAt
	logged := healed
	if err := waitCond(ctx, "the hub to catch up", 30*time.Minute, func() bool {
		n, _, _ := hub.state(ctx)
		if time.Since(logged) >= time.Second {
			logged = time.Now()
			hub.logSource(ctx, cfg.log, n)
		}
		return n >= siteAt
	}); err != nil {
		return w, err
	}
	w.catchup = time.Since(healed)
	watch.next(phaseAfter)
	if w.report, err = edge.Check(ctx, rl.Conn().Active(), rcfg.Edge.WithDefaults(), edge.Site{Domain: e.siteDomain, Stream: siteStream}); err != nil {
		return w, fmt.Errorf("edge check: %w", err)
	}

	// Two more seconds of steady traffic, then everything to the hub.
	if err := ctxtime.Sleep(ctx, 2*time.Second); err != nil {
		return w, err
	}
	src.Close()
	if err := waitCond(ctx, "the relay to take everything", 10*time.Minute, view.Idle); err != nil {
		return w, err
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sink.Flush(fctx); err != nil {
		return w, fmt.Errorf("flush: %w", err)
	}
	w.silence, w.waited, w.long, w.blocked = watch.end()
	after := sink.Stats()
	w.timeouts = after.Timeouts - before.Timeouts
	w.switches = after.Switches - before.Switches
	_, siteEnd, err := site.state(ctx)
	if err != nil {
		return w, err
	}
	if err := waitCond(ctx, "the hub to have everything", 10*time.Minute, func() bool {
		n, _, _ := hub.state(ctx)
		return n >= siteEnd
	}); err != nil {
		return w, err
	}
	b := rl.Bridge()
	expected := src.ExpectedIDs(func(tag string) string { s, _ := b.Subject(src.Name(), tag); return s })
	actx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if w.audit, err = natstest.AuditStream(actx, hub.nc, hubStream, expected); err != nil {
		return w, fmt.Errorf("audit: %w", err)
	}
	return w, nil
}

// ldmActiveNode puts the site node under the relay's active connection
// in lame-duck mode, restarts it and waits for the site stream to be
// current again.
func ldmActiveNode(ctx context.Context, e *wanWorld, rl *relay.Relay, stream string) error {
	nc := rl.Conn().Active()
	if nc == nil {
		return errors.New("the relay has no active connection")
	}
	return e.ldmNode(ctx, nc.ConnectedUrl(), stream)
}

// startEdgeRelay is relay.Start with its error said to be the relay's.
func startEdgeRelay(ctx context.Context, c *relay.Config, opts ...relay.Option) (*relay.Relay, error) {
	rl, err := relay.Start(ctx, c, opts...)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	return rl, nil
}
