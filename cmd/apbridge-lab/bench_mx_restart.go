package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
)

// mxSettle is how long a restart scenario watches the gateway after the
// data flows again, so that a late second subscribe is counted with the
// event that caused it.
const mxSettle = 700 * time.Millisecond

// mxSessionAge is how old the session is at least when mx-restart ends
// its stream gracefully: a plant's sessions live for days; the source
// reopens at once only after a session that lived more than a second.
const mxSessionAge = 2 * time.Second

// benchMxRestart runs one gateway with --tags counters at 10 Hz and, each
// run, (a) ends its streams gracefully, (b) kills it and restarts it a
// second later.
//
// (a) graceful_good_again_ms is from EndStreams to every tag having a Good
// update with a value above the data's value when EndStreams returned: the
// old session may still deliver what it held, so only a newer tick proves
// the new session; the figure includes the wait for that tick (up to one
// 100 ms period). (b) good_again_ms is from Restart returning (the gateway
// answers again) to every tag having a Good update received after it: the
// old session has been gone for a second by then.
func benchMxRestart(ctx context.Context, cfg benchConfig) (*result, error) {
	n := cmp.Or(cfg.tags, mxDefaultTags)
	cl, err := startBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	const prefix = "Rs"
	data := mxsim.NewData()
	tick := mxTickFor(n)
	stopData := data.RunCounters(prefix, n, tick)
	defer stopData()
	gw, err := startMxGateway(cfg, data)
	if err != nil {
		return nil, err
	}
	defer gw.Close()
	tags := mxCounterTags(prefix, n)
	rl, err := startMxRelay(ctx, cfg, cl, "mxrs", mxsource.Config{Endpoints: []string{gw.Addr()}}, tags, mxRelayOpts{})
	if err != nil {
		return nil, err
	}
	defer rl.close()
	if _, err := rl.con.waitAllGood(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("first subscribe: %w", err)
	}
	if err := sleepCtx(ctx, mxSettle); err != nil {
		return nil, err
	}

	r := &result{}
	var graceful, again []float64
	var gracefulCmds, gracefulBulk, restartCmds, restartBulk []uint64
	var gracefulLost, restartLost uint64
	for run := 1; run <= cfg.runs; run++ {
		// (a) A graceful end of the stream, of a session that has lived
		// mxSessionAge: the source reopens a younger one only after a
		// backoff, lest a gateway that ends every session be hammered.
		if err := sleepCtx(ctx, time.Until(rl.lastUp().Add(mxSessionAge))); err != nil {
			return nil, err
		}
		s0 := gw.Stats()
		t0 := time.Now()
		rl.con.mark(t0, math.MaxInt64)
		rl.con.allowSnapshot()
		c0 := rl.con.counts()
		gw.EndStreams()
		rl.con.setNewer(mxCounterValue(data, prefix))
		last, err := rl.con.waitAllGood(ctx, 15*time.Second)
		if err != nil {
			return nil, fmt.Errorf("run %d: after the graceful end: %w", run, err)
		}
		graceful = append(graceful, ms(last.Sub(t0)))
		if err := sleepCtx(ctx, mxSettle); err != nil {
			return nil, err
		}
		s1 := gw.Stats()
		c1 := rl.con.counts()
		gracefulLost += c1.lost - c0.lost
		gracefulCmds = append(gracefulCmds, mxSubscribeCommands(s1)-mxSubscribeCommands(s0))
		gracefulBulk = append(gracefulBulk, s1.CommandsByKind["SubscribeBulk"]-s0.CommandsByKind["SubscribeBulk"])

		// (b) The gateway's process dies and comes back a second later.
		gw.Kill()
		if err := sleepCtx(ctx, time.Second); err != nil {
			return nil, err
		}
		if err := gw.Restart(); err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		t1 := time.Now()
		rl.con.mark(t1, -1)
		rl.con.allowSnapshot()
		last, err = rl.con.waitAllGood(ctx, 30*time.Second)
		if err != nil {
			return nil, fmt.Errorf("run %d: after the restart: %w", run, err)
		}
		again = append(again, ms(last.Sub(t1)))
		if err := sleepCtx(ctx, mxSettle); err != nil {
			return nil, err
		}
		s2 := gw.Stats()
		restartLost += rl.con.counts().lost - c1.lost
		restartCmds = append(restartCmds, mxSubscribeCommands(s2)-mxSubscribeCommands(s1))
		restartBulk = append(restartBulk, s2.CommandsByKind["SubscribeBulk"]-s1.CommandsByKind["SubscribeBulk"])

		r.Runs++
		fmt.Fprintf(cfg.progress, "  run %d: graceful end: Good again in %.1f ms (%d subscribe commands); restart: Good again in %.1f ms (%d SubscribeBulk)\n",
			run, graceful[run-1], gracefulCmds[run-1], again[run-1], restartBulk[run-1])
	}
	c := rl.con.counts()
	r.Lost, r.Duplicated = c.lost, c.dup
	r.MaxGap = ms(max(c.maxGap0-tick, 0))
	r.set("period_ms", ms(tick))
	r.set("tags", n)
	// (c) blips, on a relay of their own: a stream broken under a live
	// gateway resumes: 0 lost, 0 new sessions, 0 resubscribes.
	b, err := mxBlips(ctx, cfg, cl, data, tags)
	if err != nil {
		return nil, fmt.Errorf("blips: %w", err)
	}
	r.set("blip_lost", b.lost)
	r.set("blip_resumes", b.resumes)
	r.set("blip_sessions_opened", b.sessions)
	r.set("blip_subscribe_bulk", b.bulk)
	if r.Runs > 0 {
		r.set("good_again_ms_p50", percentile(again, 50))
		r.set("good_again_ms_p99", percentile(again, 99))
		r.set("good_again_ms_max", percentile(again, 100))
		r.set("graceful_good_again_ms_p50", percentile(graceful, 50))
		r.set("graceful_good_again_ms_p99", percentile(graceful, 99))
		r.set("resubscribes_per_restart", slices.Max(restartBulk))
		r.set("resubscribes_per_restart_min", slices.Min(restartBulk))
		r.set("subscribe_commands_per_restart", slices.Max(restartCmds))
		r.set("resubscribes_per_graceful_end", slices.Max(gracefulBulk))
		r.set("resubscribes_per_graceful_end_min", slices.Min(gracefulBulk))
		r.set("subscribe_commands_per_graceful_end", slices.Max(gracefulCmds))
	}
	r.set("graceful_lost", gracefulLost)
	r.set("restart_lost", restartLost)
	r.set("snapshot_repeats", c.repeats)
	r.set("bad_updates", c.bad)
	r.set("sessions_opened", rl.src.Stats().SessionsOpened)
	return r, nil
}

type mxBlipCounts struct{ lost, resumes, sessions, bulk uint64 }

// mxBlips resets the connection between a relay and a live gateway
// cfg.runs times, through a fault proxy (its own gateway and relay: a
// proxy that accepts while its gateway is down would change what (b)
// measures), and counts what the blips cost.
func mxBlips(ctx context.Context, cfg benchConfig, cl *natstest.Cluster, data *mxsim.Data, tags []bridge.TagConfig) (mxBlipCounts, error) {
	var b mxBlipCounts
	gw, err := startMxGateway(cfg, data)
	if err != nil {
		return b, err
	}
	defer gw.Close()
	proxy, err := faultproxy.New(gw.Addr())
	if err != nil {
		return b, err
	}
	defer proxy.Close()
	rl, err := startMxRelay(ctx, cfg, cl, "mxbl", mxsource.Config{Endpoints: []string{proxy.Addr()}}, tags, mxRelayOpts{})
	if err != nil {
		return b, err
	}
	defer rl.close()
	if _, err := rl.con.waitAllGood(ctx, 30*time.Second); err != nil {
		return b, fmt.Errorf("first subscribe: %w", err)
	}
	for run := 1; run <= cfg.runs; run++ {
		if err := sleepCtx(ctx, mxSettle); err != nil {
			return b, err
		}
		src0, c0, s0 := rl.src.Stats(), rl.con.counts(), gw.Stats()
		proxy.ResetAll()
		if err := waitCond(ctx, "the stream resumed or the session reopened", 10*time.Second, func() bool {
			st := rl.src.Stats()
			return st.Resumes > src0.Resumes || st.SessionsOpened > src0.SessionsOpened
		}); err != nil {
			return b, fmt.Errorf("run %d: %w", run, err)
		}
		if err := sleepCtx(ctx, mxSettle); err != nil {
			return b, err
		}
		src1, s1 := rl.src.Stats(), gw.Stats()
		b.lost += rl.con.counts().lost - c0.lost
		b.resumes += src1.Resumes - src0.Resumes
		b.sessions += src1.SessionsOpened - src0.SessionsOpened
		b.bulk += s1.CommandsByKind["SubscribeBulk"] - s0.CommandsByKind["SubscribeBulk"]
		fmt.Fprintf(cfg.progress, "  blip %d: %d resumed, %d sessions opened, %d lost so far\n", run, src1.Resumes-src0.Resumes, src1.SessionsOpened-src0.SessionsOpened, b.lost)
	}
	return b, nil
}
