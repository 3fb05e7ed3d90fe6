package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
)

// mxStormTags is the incident's instance: 244 attributes.
const mxStormTags = 244

// stormTiming is mx-storm's clock: the incident's by default, or a scaled
// one for a quick look.
type stormTiming struct {
	// window is how long the subscribes are watched, from the first.
	window time.Duration
	// wedge is how long the gateway stays wedged, from the moment its
	// worker picks the first subscribe up.
	wedge time.Duration
	// latency is every command's latency while wedged: longer than the
	// session's command timeout.
	latency time.Duration
	// commandTimeout is the session's (0: the source's default, 60 s).
	commandTimeout time.Duration
	// guard is the relay's subscribe guard (zero: the bridge's defaults).
	guard relay.SubscribeConfig
}

// defaultStormTiming is the incident's: a gateway wedged for 60 s, the
// default guard and command timeout, watched for --storm (110 s).
func defaultStormTiming(cfg benchConfig) stormTiming {
	return stormTiming{window: cfg.storm, wedge: 60 * time.Second, latency: 90 * time.Second}
}

// shortStormTiming is the incident at a tenth of its clock, guard
// included: for trying the scenario out, not for its figures.
func shortStormTiming() stormTiming {
	return stormTiming{window: 11 * time.Second, wedge: 6 * time.Second, latency: 9 * time.Second,
		commandTimeout: 6 * time.Second,
		guard:          relay.SubscribeConfig{RetryFloor: 500 * time.Millisecond, RetryCeiling: 6 * time.Second, InFlightCeiling: 4500 * time.Millisecond}}
}

func benchMxStorm(ctx context.Context, cfg benchConfig) (*result, error) {
	return runMxStorm(ctx, cfg, defaultStormTiming(cfg))
}

// stormTagConfigs are the instance's attributes, defined in data with
// constant values: every update after a subscribe is its advise's first.
func stormTagConfigs(data *mxsim.Data) []bridge.TagConfig {
	tags := make([]bridge.TagConfig, mxStormTags)
	for i := range tags {
		addr := fmt.Sprintf("Z28061.A%03d", i)
		tags[i] = bridge.TagConfig{Name: addr, Address: addr}
		data.Define(addr, int64(i))
	}
	return tags
}

// runMxStorm replays the subscribe-storm incident on the gateway source
// (phase A), then counts the gateway commands one subscribe of every tag
// costs with and without the supervisory bulk subscribe (phase B).
func runMxStorm(ctx context.Context, cfg benchConfig, t stormTiming) (*result, error) {
	cl, err := startBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	data := mxsim.NewData()
	tags := stormTagConfigs(data)
	r := &result{Runs: 1}
	if err := mxStormWedge(ctx, cfg, cl, data, tags, t, r); err != nil {
		return nil, fmt.Errorf("phase A: %w", err)
	}
	if err := mxStormCommands(ctx, cfg, cl, data, tags, r); err != nil {
		return nil, fmt.Errorf("phase B: %w", err)
	}
	return r, nil
}

// mxStormWedge is phase A: the gateway's worker wedges as it picks up the
// first subscribe, for t.wedge, with every command taking t.latency
// meanwhile; then it recovers at once.
func mxStormWedge(ctx context.Context, cfg benchConfig, cl *natstest.Cluster, data *mxsim.Data,
	tags []bridge.TagConfig, t stormTiming, r *result) error {
	gw, err := startMxGateway(cfg, data)
	if err != nil {
		return err
	}
	defer gw.Close()
	wedged := make(chan time.Time, 1)
	var once sync.Once
	gw.OnCommand(func(_, kind string) {
		if kind == "SubscribeBulk" {
			once.Do(func() {
				wedged <- time.Now()
				gw.SetCommandLatency(t.latency)
			})
		}
	})
	defer gw.SetCommandLatency(0) // an early return must not leave the worker wedged for Close
	rl, err := startMxRelay(ctx, cfg, cl, "mxstorm", mxsource.Config{Endpoints: []string{gw.Addr()}, CommandTimeout: t.commandTimeout},
		tags, mxRelayOpts{count: true, guard: t.guard})
	if err != nil {
		return err
	}
	defer rl.close()
	var wedgeAt time.Time
	select {
	case wedgeAt = <-wedged:
	case <-time.After(30 * time.Second):
		return errors.New("no subscribe reached the gateway within 30 s")
	case <-ctx.Done():
		return ctx.Err()
	}
	_, _, first := rl.wrap.counts()
	fmt.Fprintf(cfg.progress, "  the gateway wedged at the first subscribe; it recovers in %v, watching for %v ...\n", t.wedge, t.window)
	if err := sleepCtx(ctx, time.Until(wedgeAt.Add(t.wedge))); err != nil {
		return err
	}
	recoverAt := time.Now()
	rl.con.mark(recoverAt, -1)
	gw.SetCommandLatency(0)
	last, err := rl.con.waitAllGood(ctx, t.wedge+30*time.Second)
	recovered := err == nil
	if err != nil {
		fmt.Fprintf(cfg.progress, "  not recovered: %v\n", err)
	}
	if err := sleepCtx(ctx, time.Until(first.Add(t.window))); err != nil {
		return err
	}
	st := rl.stats()
	calls, maxIn, _ := rl.wrap.counts()
	gs := gw.Stats()
	r.set("storm_s", t.window.Seconds())
	r.set("wedge_s", t.wedge.Seconds())
	r.set("command_timeout_s", t.commandTimeout.Seconds())
	if t.commandTimeout == 0 {
		r.set("command_timeout_s", mxsource.Config{}.Defaults().CommandTimeout.Seconds())
	}
	r.set("subscribe_requests", st.SubscribeRequests)
	r.set("subscribe_calls", calls)
	r.set("max_in_flight", maxIn)
	r.set("lost_replies", st.LostReplies)
	r.set("subscribe_failures", st.SubscribeFailures)
	r.set("recovered", recovered)
	if recovered {
		r.set("recover_ms", ms(last.Sub(recoverAt)))
	}
	r.set("gateway_subscribe_bulk", gs.CommandsByKind["SubscribeBulk"])
	r.set("gateway_dropped", gs.Dropped)
	r.set("max_pending", gs.MaxPending)
	fmt.Fprintf(cfg.progress, "  %d subscribe requests in %v, %d at once at most; recovered: %v\n", st.SubscribeRequests, t.window, maxIn, recovered)
	return nil
}

// mxStormCommands is phase B: a fresh relay subscribes every tag on a
// healthy gateway that advertises the supervisory bulk subscribe, then on
// one that does not; each gateway counts the commands.
func mxStormCommands(ctx context.Context, cfg benchConfig, cl *natstest.Cluster, data *mxsim.Data,
	tags []bridge.TagConfig, r *result) error {
	once := func(name string, caps []string) (mxsim.Stats, error) {
		gw, err := startMxGateway(cfg, data)
		if err != nil {
			return mxsim.Stats{}, err
		}
		defer gw.Close()
		gw.SetCapabilities(caps)
		rl, err := startMxRelay(ctx, cfg, cl, name, mxsource.Config{Endpoints: []string{gw.Addr()}}, tags, mxRelayOpts{})
		if err != nil {
			return mxsim.Stats{}, err
		}
		defer rl.close()
		if _, err := rl.con.waitAllGood(ctx, 60*time.Second); err != nil {
			return mxsim.Stats{}, fmt.Errorf("%s: %w", name, err)
		}
		return gw.Stats(), nil
	}
	bulk, err := once("mxstormbulk", mxsim.DefaultCapabilities())
	if err != nil {
		return err
	}
	old := slices.DeleteFunc(mxsim.DefaultCapabilities(), func(c string) bool { return c == mxsim.CapBulkSubscribeSupervisory })
	fallback, err := once("mxstormold", old)
	if err != nil {
		return err
	}
	// Per session: a session reopened (a heartbeat missed on a loaded
	// machine) needs its own subscribe of every tag; a second subscribe on
	// one session would still show as 2.
	r.set("commands_per_subscribe", perSession(mxSubscribeCommands(bulk), bulk))
	r.set("sessions_opened", bulk.CommandsByKind["Register"])
	r.set("supervisory_bulk", bulk.SupervisoryBulk)
	r.set("commands_per_subscribe_fallback", perSession(mxSubscribeCommands(fallback), fallback))
	r.set("supervisory_bulk_to_old_gateway", fallback.SupervisoryBulk)
	r.set("subscribe_bulk_to_old_gateway", fallback.CommandsByKind["SubscribeBulk"])
	r.set("max_pending_fallback", fallback.MaxPending)
	r.set("tags", len(tags))
	return nil
}

// perSession divides n by the sessions the gateway registered: a whole
// number when it divides evenly, a fraction otherwise.
func perSession(n uint64, st mxsim.Stats) any {
	sessions := max(st.CommandsByKind["Register"], 1)
	if n%sessions == 0 {
		return n / sessions
	}
	return float64(n) / float64(sessions)
}
