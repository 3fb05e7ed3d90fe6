package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/internal/procstat"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

const (
	mxTPTags   = 10000
	mxTPGroups = 10 // RunCounters groups, started evenly over the period
	// mxTPQueue is the gateway's event queue: the default (10,000) is one
	// scan of the 10,000 tags, too little slack to tell the relay's rate
	// from the simulator's burst.
	mxTPQueue = 100_000
	// mxTPProbe is how long each rate of the ladder is watched.
	mxTPProbe = 2 * time.Second
)

// mxTPCPUProfileEnv names a file for a CPU profile of the steady window.
const mxTPCPUProfileEnv = "APBRIDGE_LAB_MX_CPUPROFILE"

// mxTPRates is the ladder of offered rates (changes/s). RunCounters
// cannot offer much more than the top one in this process.
var mxTPRates = []float64{30_000, 50_000, 70_000, 100_000, 150_000, 200_000, 300_000, 500_000, 1_000_000}

// mxTP is the throughput rig: one gateway, the relay, a counting consumer.
type mxTP struct {
	cfg      benchConfig
	cl       *natstest.Cluster
	data     *mxsim.Data
	gw       *mxsim.Gateway
	rl       *mxRelay
	prefixes []string
	got      atomic.Uint64
	size     atomic.Int64 // a relay message's size, headers included
	peakHeap float64      // MiB, sampled over the steady window
}

// mxTPRun is one watched stretch at one offered rate.
type mxTPRun struct {
	offered, delivered float64
	faulted            bool
}

func (p mxTPRun) sustained() bool { return !p.faulted && p.delivered >= 0.95*p.offered }

// benchMxThroughput finds the highest rate of changes of 10,000 tags the
// relay delivers without falling behind (the gateway's event queue would
// overflow and fault the session), watches it for the window, then
// publishes messages of the same shape flat out with plain nats.go to the
// same consumer.
func benchMxThroughput(ctx context.Context, cfg benchConfig) (*result, error) {
	window := cfg.duration
	if window == 60*time.Second {
		window = 15 * time.Second
	}
	cl, err := startBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	p := &mxTP{cfg: cfg, cl: cl, data: mxsim.NewData()}
	var tags []bridge.TagConfig
	per := mxTPTags / mxTPGroups
	for g := range mxTPGroups {
		prefix := "TP" + strconv.Itoa(g) + "_"
		p.prefixes = append(p.prefixes, prefix)
		for _, t := range mxCounterTags(prefix, per) {
			tags = append(tags, t)
			p.data.Define(t.Address, int64(0))
		}
	}
	if p.gw, err = startMxGateway(cfg, p.data); err != nil {
		return nil, err
	}
	defer p.gw.Close()
	p.gw.SetEventQueueSize(mxTPQueue)
	if p.rl, err = startMxRelay(ctx, cfg, cl, "mxtp", mxsource.Config{Endpoints: []string{p.gw.Addr()}}, tags,
		mxRelayOpts{handler: p.handle}); err != nil {
		return nil, err
	}
	defer p.rl.close()
	if err := p.waitSubscribed(ctx); err != nil {
		return nil, err
	}

	// Up the ladder to the first rate the relay does not sustain (a rate
	// it falls behind at costs a fault of the gateway session and a
	// resubscribe of every tag, so the ladder climbs), then two halvings
	// of the gap.
	var best, fail float64
	var ladder []string
	try := func(rate float64) (bool, error) {
		run, err := p.watch(ctx, rate, mxTPProbe, false)
		if err != nil {
			return false, err
		}
		ladder = append(ladder, fmt.Sprintf("%.0f:%.0f:%v", run.offered, run.delivered, run.sustained()))
		fmt.Fprintf(cfg.progress, "  asked %.0f/s: offered %.0f/s, delivered %.0f/s, faulted %v\n", rate, run.offered, run.delivered, run.faulted)
		return run.sustained(), nil
	}
	for _, rate := range mxTPRates {
		ok, err := try(rate)
		if err != nil {
			return nil, err
		}
		if !ok {
			fail = rate
			break
		}
		best = rate
	}
	if best == 0 {
		return nil, fmt.Errorf("the relay fell behind at %.0f/s already", mxTPRates[0])
	}
	for range 2 {
		if fail == 0 {
			break
		}
		mid := math.Sqrt(best * fail)
		ok, err := try(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			best = mid
		} else {
			fail = mid
		}
	}

	// The probes are short: a rate at the edge can still fall behind
	// over the window. Then the window is run again a tenth lower, once.
	var steady mxTPRun
	for try := 0; try < 2; try++ {
		fmt.Fprintf(cfg.progress, "  steady at %.0f/s offered for %v ...\n", best, window)
		if steady, err = p.watch(ctx, best, window, true); err != nil {
			return nil, err
		}
		if !steady.faulted {
			break
		}
		fmt.Fprintf(cfg.progress, "  the gateway session faulted: the relay fell behind\n")
		best *= 0.9
	}
	relayed := p.rl.stats()
	plain, plainSize, err := p.plain(ctx, tags, window)
	if err != nil {
		return nil, err
	}
	res := &result{Runs: 1}
	res.set("tags", mxTPTags)
	res.set("window_s", window.Seconds())
	res.set("offered_per_s", round0(steady.offered))
	res.set("delivered_per_s", round0(steady.delivered))
	res.set("plain_per_s", round0(plain))
	res.set("ratio", round3(steady.delivered/plain))
	res.set("steady_faulted", steady.faulted)
	res.set("ladder", ladder)
	res.set("event_queue", mxTPQueue)
	res.set("msg_bytes", p.size.Load())
	res.set("plain_msg_bytes", plainSize)
	res.set("publish_errors", relayed.PublishErrors)
	// VmHWM of this process: the relay, the gateway simulator, the NATS
	// cluster and the consumer together, over the whole bench run.
	res.set("rss_mb", round3(procstat.PeakRSS()))
	res.set("peak_heap_mb", round3(p.peakHeap))
	return res, nil
}

func (p *mxTP) handle(m *nats.Msg) {
	if p.got.Add(1) == 1 {
		n := len(m.Subject) + len(m.Data)
		for k, vs := range m.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		p.size.Store(int64(n))
	}
}

// waitSubscribed waits until the gateway advises every tag on one session
// and the consumer has stopped receiving.
func (p *mxTP) waitSubscribed(ctx context.Context) error {
	if err := waitCond(ctx, "every tag advised", 60*time.Second, func() bool {
		st := p.gw.Stats()
		return st.Sessions == 1 && st.Advised == mxTPTags
	}); err != nil {
		return err
	}
	last := p.got.Load()
	return waitCond(ctx, "the consumer quiet", 60*time.Second, func() bool {
		if err := sleepCtx(ctx, 300*time.Millisecond); err != nil {
			return true
		}
		n := p.got.Load()
		quiet := n == last
		last = n
		return quiet
	})
}

// counted is the sum of the groups' counter values, times the group size:
// the changes the data made.
func (p *mxTP) counted() float64 {
	var n int64
	for _, prefix := range p.prefixes {
		n += mxCounterValue(p.data, prefix)
	}
	return float64(n) * float64(mxTPTags/mxTPGroups)
}

// watch drives every tag at rate changes/s for a second, then measures
// for d; a fault ends the stretch early. It waits for the relay to be
// subscribed and quiet again before it returns.
func (p *mxTP) watch(ctx context.Context, rate float64, d time.Duration, steady bool) (mxTPRun, error) {
	period := time.Duration(float64(mxTPTags) / rate * float64(time.Second))
	faults0 := p.gw.Stats().Faults
	opened0 := p.rl.src.Stats().SessionsOpened
	faulted := func() bool {
		return p.gw.Stats().Faults > faults0 || p.rl.src.Stats().SessionsOpened > opened0
	}
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
		stops = nil
	}
	defer stopAll()
	for _, prefix := range p.prefixes {
		// RunCounters defines its items at 0 again: the relay sees one
		// more change of each.
		stops = append(stops, p.data.RunCounters(prefix, mxTPTags/mxTPGroups, period))
		if err := sleepCtx(ctx, period/mxTPGroups); err != nil {
			return mxTPRun{}, err
		}
	}
	if err := sleepCtx(ctx, time.Second); err != nil {
		return mxTPRun{}, err
	}
	stopProfile := func() {}
	if steady {
		stopProfile = p.profile()
	}
	t0, n0, c0 := time.Now(), p.got.Load(), p.counted()
	for end := t0.Add(d); time.Now().Before(end) && !faulted(); {
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return mxTPRun{}, err
		}
	}
	t1, n1, c1 := time.Now(), p.got.Load(), p.counted()
	stopProfile()
	stopAll()
	run := mxTPRun{faulted: faulted()}
	if el := t1.Sub(t0).Seconds(); el > 0.1 {
		run.offered, run.delivered = (c1-c0)/el, float64(n1-n0)/el
	}
	return run, p.waitSubscribed(ctx)
}

// profile samples the Go heap, and writes a CPU profile if
// APBRIDGE_LAB_MX_CPUPROFILE names a file, until the returned func is
// called.
func (p *mxTP) profile() func() {
	stopSampling := procstat.SampleHeap(100 * time.Millisecond)
	var f *os.File
	if path := os.Getenv(mxTPCPUProfileEnv); path != "" {
		var err error
		if f, err = os.Create(path); err == nil {
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				f = nil
			}
		}
	}
	return func() {
		p.peakHeap = max(p.peakHeap, float64(stopSampling().InUse)/(1<<20))
		if f != nil {
			pprof.StopCPUProfile()
			f.Close()
			fmt.Fprintf(p.cfg.progress, "  CPU profile of the steady window in %s\n", f.Name())
		}
	}
}

// plain publishes updates of the same tags, encoded as the bridge encodes
// them, flat out with plain nats.go from one connection to the broker the
// relay publishes to, and returns the rate the consumer received them at
// over d, after a second of warm-up, and a message's size.
func (p *mxTP) plain(ctx context.Context, tags []bridge.TagConfig, d time.Duration) (float64, int64, error) {
	srv, ok := p.rl.rl.Conn().ActiveServer()
	if !ok {
		return 0, 0, fmt.Errorf("the relay has no active NATS server")
	}
	nc, err := nats.Connect(srv.URL, p.cl.ClientOptions()...)
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	subjects := make([]string, len(tags))
	for i, t := range tags {
		subjects[i] = "apbridge.mxtp." + t.Name
	}
	var size int64
	var n0, n1 uint64
	var t0, t1 time.Time
	start := time.Now()
	var buf []byte
	var seq uint64
	for i := 0; ctx.Err() == nil; i = (i + 1) % len(tags) {
		if i == 0 {
			now := time.Now()
			switch {
			case t0.IsZero() && now.Sub(start) >= time.Second:
				t0, n0 = now, p.got.Load()
			case !t0.IsZero() && now.Sub(t0) >= d:
				t1, n1 = now, p.got.Load()
			}
			if !t1.IsZero() {
				break
			}
			seq++
		}
		now := time.Now()
		u := wire.Update{Tag: tags[i].Name, Value: int64(seq), Status: wire.StatusGood, SourceTime: now, ServerTime: now, Seq: seq}
		buf, _ = wire.AppendJSON(buf[:0], &u)
		m := &nats.Msg{Subject: subjects[i], Data: buf, Header: make(nats.Header, 6)}
		wire.SetHeaders(m.Header, &u)
		if size == 0 {
			size = int64(len(m.Subject) + len(m.Data))
			for k, vs := range m.Header {
				for _, v := range vs {
					size += int64(len(k) + len(v) + 4)
				}
			}
		}
		if err := nc.PublishMsg(m); err != nil {
			return 0, 0, err
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	nc.FlushTimeout(10 * time.Second)
	return float64(n1-n0) / t1.Sub(t0).Seconds(), size, nil
}
