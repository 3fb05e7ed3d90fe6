package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/testcluster/mxsim"
)

// benchMxFailover runs a gateway pair on one mxsim.Data, --tags counters at
// 10 Hz, and kills the active gateway cfg.runs times, alternating: the
// killed one is restarted and waited for as the prepared standby before
// the next run.
//
// switch_ms is from the Kill call to the first update on the consumer that
// the old gateway cannot have sent: one of the promotion's refresh (the
// bridge marks it Apb-Refresh, and nothing else is marked during a run), or
// a counter value above the data's value when Kill returned. resume_ms is
// until every tag has such a value again: the data flows as before.
func benchMxFailover(ctx context.Context, cfg benchConfig) (*result, error) {
	mode, err := mxMode(cfg)
	if err != nil {
		return nil, err
	}
	n := cmp.Or(cfg.tags, mxDefaultTags)
	cl, err := startBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	const prefix = "Fo"
	data := mxsim.NewData()
	tick := mxTickFor(n)
	stopData := data.RunCounters(prefix, n, tick)
	defer stopData()
	var gws [2]*mxsim.Gateway
	for i := range gws {
		g, err := startMxGateway(cfg, data)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		// Every counter changes in the same instant: a gateway's event
		// queue must hold that burst beside a batch's first values, or it
		// faults the session (at 10,000 tags the default 10,000 is one
		// tick). Real tags rarely change all at once.
		g.SetEventQueueSize(max(mxsim.DefaultEventQueue, 4*n))
		gws[i] = g
	}
	tags := mxCounterTags(prefix, n)
	rl, err := startMxRelay(ctx, cfg, cl, "mxfo", mxsource.Config{Endpoints: []string{gws[0].Addr(), gws[1].Addr()}, Mode: mode}, tags, mxRelayOpts{})
	if err != nil {
		return nil, err
	}
	defer rl.close()

	// The standby is prepared when its gateway has carried every item in
	// the command of the mode since it (re)started.
	prepKind := "AddItemBulk"
	if mode == mxsource.ModeHot {
		prepKind = "SubscribeBulk"
	}
	var prepBase [2]uint64
	active := func() int {
		h := rl.src.Health()
		for i, g := range gws {
			if g.Addr() == h.Endpoint {
				return i
			}
		}
		return -1
	}
	ready := func() bool {
		a := active()
		if a < 0 || rl.src.Health().State != bridge.StateConnected {
			return false
		}
		b := 1 - a
		return gws[b].Stats().Items[prepKind]-prepBase[b] >= uint64(n)
	}

	r := &result{}
	var resume, took, detect []float64
	causes := map[string]int{}
	for run := 1; run <= cfg.runs; run++ {
		if err := waitCond(ctx, "the standby gateway prepared", 30*time.Second, ready); err != nil {
			return nil, fmt.Errorf("run %d: %w (health %+v)", run, err, rl.src.Health())
		}
		// Traffic flows: every tag has a Good update from now on.
		rl.con.mark(time.Now(), -1)
		if _, err := rl.con.waitAllGood(ctx, 5*time.Second); err != nil {
			return nil, fmt.Errorf("run %d: before the kill: %w", run, err)
		}
		// At a random phase of the 100 ms tick: the wait above ends just
		// after one.
		if err := sleepCtx(ctx, rand.N(tick)); err != nil {
			return nil, err
		}
		a := active()
		before := len(rl.switches())
		// Until Kill returns, only a refresh is new.
		t0 := time.Now()
		rl.con.mark(t0, math.MaxInt64)
		gws[a].Kill()
		rl.con.setNewer(mxCounterValue(data, prefix))
		sw, err := rl.con.waitFirstNew(ctx, 15*time.Second)
		if err != nil {
			return nil, fmt.Errorf("run %d: no update from the new gateway: %w", run, err)
		}
		last, err := rl.con.waitAllGood(ctx, 15*time.Second)
		if err != nil {
			return nil, fmt.Errorf("run %d: after the switch: %w", run, err)
		}
		if err := waitCond(ctx, "the source's switch event", 5*time.Second, func() bool { return len(rl.switches()) > before }); err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		ev := rl.switches()[before]
		r.Runs++
		r.addSwitch(sw.Sub(t0))
		resume = append(resume, ms(last.Sub(t0)))
		took = append(took, ms(ev.Took))
		detect = append(detect, ms(ev.At.Sub(t0)))
		causes[ev.Cause]++
		c := rl.con.counts()
		fmt.Fprintf(cfg.progress, "  run %d: killed %s, switch %v, all tags new again %v (source: detected %v, took %v), lost so far %d\n", run,
			gws[a].Addr(), sw.Sub(t0).Round(time.Microsecond), last.Sub(t0).Round(time.Microsecond),
			ev.At.Sub(t0).Round(time.Microsecond), ev.Took.Round(time.Microsecond), c.lost)
		// The killed gateway comes back, to be the standby of the next run.
		prepBase[a] = gws[a].Stats().Items[prepKind]
		if err := gws[a].Restart(); err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
	}
	c := rl.con.counts()
	r.Lost, r.Duplicated = c.lost, c.dup
	// A session the gateway faulted (event queue overflow) loses data
	// changes: say so beside the loss.
	r.set("gateway_faults", gws[0].Stats().Faults+gws[1].Stats().Faults)
	r.MaxGap = ms(max(c.maxGap0-tick, 0))
	r.set("period_ms", ms(tick))
	r.set("mode", mode)
	r.set("tags", n)
	if len(resume) > 0 {
		r.set("resume_ms_p50", percentile(resume, 50))
		r.set("resume_ms_p99", percentile(resume, 99))
		r.set("source_switch_ms_p50", percentile(took, 50))
		r.set("source_switch_ms_p99", percentile(took, 99))
		r.set("detect_ms_p50", percentile(detect, 50))
		r.set("detect_ms_max", percentile(detect, 100))
	}
	r.set("switches", total(causes))
	r.set("cause", causeList(causes))
	r.set("snapshot_repeats", c.repeats)
	r.set("bad_updates", c.bad)
	r.set("updates", c.updates)
	return r, nil
}
