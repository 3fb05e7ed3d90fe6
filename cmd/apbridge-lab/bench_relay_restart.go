package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/internal/nodeopcua"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

const (
	rrStream = "RR"
	rrSource = "line1"
	// rrDefaultTags are the counters without --tags; rrDefaultRuns the
	// runs without --runs.
	rrDefaultTags = 20
	rrDefaultRuns = 10
	rrMaxTags     = 1000
	// rrPause is how long the relay is dead before it starts again.
	rrPause = time.Second
	// rrSettle is how long the relay streams after every counter flows
	// again, before the next kill: long enough for what a successor does
	// after its first values (a republish, a refresh) to show in the run.
	rrSettle = 2 * time.Second
	// rrWithin bounds the start of the relay process and the wait for
	// every counter to flow.
	rrWithin = 30 * time.Second
	// rrStatic is the name of the tag that never changes: a new
	// subscription sends its value, a subscription taken over does not.
	rrStatic = "Static"
)

func relayRestartScenarios() []scenario {
	return []scenario{
		{"relay-restart", "one relay process (JetStream sink; --sink core), a Warm OPC UA pair (--server node: node-opcua), --tags 10 Hz counters (default 20): SIGKILL, started again 1 s later with the same config, --runs times (default 10); the stream audited by each counter's values", benchRelayRestart},
	}
}

// rrTag is a tag of the relay's config.
type rrTag struct{ name, address string }

// rrTarget is the Warm pair the relay reads: the active at 250, the
// standby at 90.
type rrTarget struct {
	endpoints []string
	// security is the source's security section (YAML, indented for
	// it), empty for none.
	security string
	counters []rrTag
	static   rrTag
	close    func()
}

// startRRTarget starts the pair with n counters ticking every 100 ms.
func startRRTarget(ctx context.Context, cfg benchConfig, n int) (*rrTarget, error) {
	if cfg.server == serverNode {
		return startRRNode(ctx, n)
	}
	// Tag kinds rotate Counter, Ramp, Sine, Bool: every fourth is a
	// counter, and only those are relayed.
	p, err := uaserver.StartPair(ctx, uaserver.WithTags(4*n), uaserver.WithTagInterval(100*time.Millisecond), uaserver.WithSetpoints(1),
		uaserver.WithServiceLevels(uaserver.LevelPrimary, uaserver.LevelStandby))
	if err != nil {
		return nil, err
	}
	t := &rrTarget{endpoints: p.Endpoints(), close: p.Close}
	for _, tg := range p.Tags() {
		if tg.Kind == uaserver.TagCounter {
			t.counters = append(t.counters, rrTag{tg.Name, tg.NodeID().String()})
		}
	}
	t.static = rrTag{rrStatic, p.Setpoints()[0].NodeID().String()}
	return t, nil
}

// rrPassword is the node-opcua servers' password of the relay's user.
const rrPassword = "rr-relay-1"

// startRRNode starts two node-opcua servers, Warm (Bad_OutOfService
// below 200): its variables T0, T4, T8, ... count up every 100 ms, pushed
// as they change; Setpoint does not change.
func startRRNode(ctx context.Context, n int) (*rrTarget, error) {
	var srv [2]*nodeopcua.Server
	errs := make(chan error, 2)
	for i, level := range []int{int(uaserver.LevelPrimary), int(uaserver.LevelStandby)} {
		go func() {
			// A user on a signed and encrypted channel: node-opcua
			// transfers a subscription to a session of the same user
			// only (an anonymous one only on a secured channel of the
			// same application, Part 4 5.13.7).
			s, err := nodeopcua.Start(ctx, nodeopcua.Config{ServiceLevel: level, Tags: 4 * n, TagMs: 100, RedundancySupport: "Warm",
				Policies: []string{"None", "Basic256Sha256"}, Modes: []string{"None", "SignAndEncrypt"}, Users: map[string]string{"relay": rrPassword}})
			srv[i] = s
			errs <- err
		}()
	}
	var first error
	for range 2 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	t := &rrTarget{close: func() {
		for _, s := range srv {
			if s != nil {
				s.Close()
			}
		}
	}}
	if first != nil {
		t.close()
		return nil, first
	}
	t.endpoints = []string{srv[0].Endpoint, srv[1].Endpoint}
	t.security = "    security:\n      policy: Basic256Sha256\n      mode: SignAndEncrypt\n      certFile: client.pem\n      keyFile: client.key\n" +
		"      username: relay\n      password: " + rrPassword + "\n"
	for i := range n {
		t.counters = append(t.counters, rrTag{fmt.Sprintf("Counter%04d", i), fmt.Sprintf("nsu=urn:apbridge:interop;s=T%d", 4*i)})
	}
	t.static = rrTag{rrStatic, "nsu=urn:apbridge:interop;s=Setpoint"}
	return t, nil
}

// rrRig is relay-restart's world: the cluster, the pair, the relay's
// config and process, and a subscriber that stays up across the kills.
type rrRig struct {
	cfg    benchConfig
	sink   string
	cl     *natstest.Cluster
	target *rrTarget
	dir    string
	config string
	log    string
	child  *soakChild
	nc     *nats.Conn
	// stateDir says the config carries stateDir (the parser accepts it).
	stateDir bool

	mu        sync.Mutex
	published []rrObs // every update the subscriber saw
}

func benchRelayRestart(ctx context.Context, cfg benchConfig) (_ *result, err error) {
	n := cmp.Or(cfg.tags, rrDefaultTags)
	if n > rrMaxTags {
		return nil, fmt.Errorf("--tags: %d is out of range for relay-restart (valid 1-%d)", n, rrMaxTags)
	}
	if cfg.queueSize < 0 || cfg.queueSize > 65536 {
		return nil, fmt.Errorf("--queue-size: %d is out of range for relay-restart (valid 0-65536; 0: the relay's default)", cfg.queueSize)
	}
	r := &rrRig{cfg: cfg, sink: soakSinkJetStream}
	if cfg.sinkSet {
		r.sink = cfg.sink
	}
	defer r.close()
	defer func() {
		if err != nil && r.dir != "" {
			fmt.Fprintf(cfg.progress, "  the relay's log and config are kept in %s\n", r.dir)
			r.dir = ""
		}
	}()
	if err := r.start(ctx, n); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.progress, "  relay-restart: %d counters on the %s pair, sink %s, stateDir %v, %d runs\n", n, cfg.server, r.sink, r.stateDir, cfg.runs)
	if err := r.waitFlowing(ctx, time.Now().Add(-time.Hour)); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	if err := ctxtime.Sleep(ctx, rrSettle); err != nil {
		return nil, err
	}
	runs := make([]rrRestart, 0, cfg.runs)
	var relayRefreshes, relayTransfers uint64
	transfersFound := false
	for run := 1; run <= cfg.runs; run++ {
		var rs rrRestart
		rs.killAt = time.Now()
		r.child.kill()
		r.child = nil
		if err := ctxtime.Sleep(ctx, rrPause); err != nil {
			return nil, err
		}
		rs.restartAt = time.Now()
		if r.child, err = startSoakChild(ctx, r.config, r.log, cfg.verbose); err != nil {
			return nil, fmt.Errorf("run %d: relay not started again: %w (its log: %s)", run, err, r.log)
		}
		runs = append(runs, rs)
		if err := r.waitFlowing(ctx, rs.restartAt); err != nil {
			return nil, fmt.Errorf("run %d: %w (the relay's log: %s)", run, err, r.log)
		}
		if err := ctxtime.Sleep(ctx, rrSettle); err != nil {
			return nil, err
		}
		// The relay's own counts, of this process: what it says it did
		// after the restart.
		st, err := r.child.askRaw("state")
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		srcs, _ := st["sources"].([]any)
		for _, s := range srcs {
			if f, ok := s.(map[string]any)["refreshes"].(float64); ok {
				relayRefreshes += uint64(f)
			}
		}
		if t, ok := rrTransferCount(srcs); ok {
			relayTransfers, transfersFound = relayTransfers+t, true
		}
		fmt.Fprintf(cfg.progress, "  run %d: killed, started again after %v, every counter flowing %.0f ms after the restart\n",
			run, rrPause, ms(time.Since(rs.restartAt)-rrSettle))
	}
	// A graceful stop: what the last process holds is stored.
	r.child.stop()
	r.child = nil
	obs, stored, err := r.stored(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	published := slices.Clone(r.published)
	r.mu.Unlock()
	return r.report(runs, obs, stored, published, relayRefreshes, relayTransfers, transfersFound), nil
}

// start brings the cluster, the pair and the subscriber up, writes the
// relay's config and starts the relay process.
func (r *rrRig) start(ctx context.Context, n int) (err error) {
	var copts []natstest.Option
	if r.sink == soakSinkJetStream {
		copts = append(copts, natstest.WithJetStream())
	}
	if r.cl, err = startBenchCluster(ctx, r.cfg, copts...); err != nil {
		return err
	}
	if r.target, err = startRRTarget(ctx, r.cfg, n); err != nil {
		return err
	}
	if r.dir, err = os.MkdirTemp("", "apbridge-relay-restart-"); err != nil {
		return err
	}
	r.config, r.log = filepath.Join(r.dir, "relay.yaml"), filepath.Join(r.dir, "relay.log")
	conf, err := r.relayConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(r.config, []byte(conf), 0o600); err != nil {
		return err
	}
	// The subscriber listens before the relay starts and stays up across
	// the kills: it sees every update published, stored or not.
	if r.nc, err = nats.Connect(strings.Join(r.cl.URLs(), ","), append(r.cl.ClientOptions(), nats.Name("relay-restart-audit"), nats.MaxReconnects(-1))...); err != nil {
		return err
	}
	sub, err := r.nc.Subscribe("rr.>", r.update)
	if err != nil {
		return err
	}
	sub.SetPendingLimits(-1, -1)
	if err := r.nc.FlushTimeout(10 * time.Second); err != nil {
		return err
	}
	r.child, err = startSoakChild(ctx, r.config, r.log, r.cfg.verbose)
	return err
}

// relayConfig is the relay's config file, as a site writes it. It has
// stateDir (a directory the relay owns, kept across its restarts) if the
// config parser knows the field.
func (r *rrRig) relayConfig() (string, error) {
	q := soakQuote
	var b strings.Builder
	b.WriteString("instance: rr\nsubject: \"rr.{source}.{tag}\"\nhttp:\n  listen: \"\"\n")
	b.WriteString("nats:\n  name: rr-relay\n  lameDuckHandling: SWITCH_TO_PASSIVE\n  servers:\n")
	for _, u := range r.cl.URLs() {
		fmt.Fprintf(&b, "    - %s\n", q(u))
	}
	if r.sink == soakSinkJetStream {
		fmt.Fprintf(&b, "sink: jetstream\njetstream:\n  stream: %s\n  subjects: [\"rr.>\"]\n  replicas: 3\n", rrStream)
	}
	fmt.Fprintf(&b, "sources:\n  - name: %s\n    type: opcua\n    endpoints:\n", rrSource)
	for _, e := range r.target.endpoints {
		fmt.Fprintf(&b, "      - %s\n", q(e))
	}
	b.WriteString(strings.ReplaceAll(r.target.security, "client.", filepath.Join(r.dir, "client.")))
	if r.cfg.queueSize > 0 {
		fmt.Fprintf(&b, "    queueSize: %d\n", r.cfg.queueSize)
	}
	b.WriteString("    tags:\n")
	for _, tg := range append(slices.Clone(r.target.counters), r.target.static) {
		fmt.Fprintf(&b, "      - {name: %s, address: %s}\n", q(tg.name), q(tg.address))
	}
	base := b.String()
	// The directory exists, as a site's would: a relay that checks it
	// finds it.
	state := filepath.Join(r.dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		return "", err
	}
	withState := fmt.Sprintf("stateDir: %s\n%s", q(state), base)
	_, err := relay.Parse([]byte(withState))
	switch {
	case err == nil:
		r.stateDir = true
		return withState, nil
	case strings.Contains(err.Error(), "stateDir: unknown field"):
		// A relay without the field: the same config without it. Any
		// other complaint about it is an error.
		if _, err := relay.Parse([]byte(base)); err != nil {
			return "", fmt.Errorf("relay config: %w", err)
		}
		return base, nil
	default:
		return "", fmt.Errorf("relay config: %w", err)
	}
}

// update is the subscriber's handler.
func (r *rrRig) update(m *nats.Msg) {
	o, ok := r.obs(m.Subject, m.Header, m.Data, time.Now())
	if !ok {
		return
	}
	r.mu.Lock()
	r.published = append(r.published, o)
	r.mu.Unlock()
}

// obs decodes one update.
func (r *rrRig) obs(subject string, h nats.Header, data []byte, at time.Time) (rrObs, bool) {
	u, err := wire.DecodeJSON(data)
	if err != nil {
		return rrObs{}, false
	}
	o := rrObs{subject: subject, status: u.Status, refresh: h.Get(wire.HeaderRefresh) == "true", at: at, epoch: h.Get(wire.HeaderEpoch)}
	o.seq, _ = strconv.ParseUint(h.Get(wire.HeaderSeq), 10, 64)
	if u.Tag != rrStatic {
		o.value, o.counter = rrInt(u.Value)
	}
	return o, true
}

// waitFlowing waits until every counter has reached the subscriber since
// after.
func (r *rrRig) waitFlowing(ctx context.Context, after time.Time) error {
	want := len(r.target.counters)
	deadline := time.Now().Add(rrWithin)
	for {
		seen := map[string]bool{}
		r.mu.Lock()
		for i := len(r.published) - 1; i >= 0 && !r.published[i].at.Before(after); i-- {
			if r.published[i].counter {
				seen[r.published[i].subject] = true
			}
		}
		r.mu.Unlock()
		if len(seen) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d counters flowing %v after the start", len(seen), want, rrWithin)
		}
		if err := ctxtime.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// stored is what the audit reads: the stream, in its order, with the JetStream
// sink; the subscriber's view with the core sink. stored counts the
// messages.
func (r *rrRig) stored(ctx context.Context) ([]rrObs, int, error) {
	if r.sink != soakSinkJetStream {
		// The subscriber has what the relay published once the last
		// process's final updates have come through the brokers.
		if err := r.nc.FlushTimeout(10 * time.Second); err != nil {
			return nil, 0, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.Clone(r.published), len(r.published), nil
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := r.cl.WaitStreamCurrent(actx, rrStream); err != nil {
		return nil, 0, err
	}
	msgs, err := natstest.ReadStream(actx, r.nc, rrStream)
	if err != nil {
		return nil, 0, fmt.Errorf("stream audit: %w", err)
	}
	var out []rrObs
	for _, m := range msgs {
		if o, ok := r.obs(m.Subject, m.Header, m.Data, m.Time); ok {
			out = append(out, o)
		}
	}
	return out, len(msgs), nil
}

// report audits and sets the figures.
func (r *rrRig) report(runs []rrRestart, obs []rrObs, stored int, published []rrObs, relayRefreshes, relayTransfers uint64, transfersFound bool) *result {
	var wasPublished func(string, int64) bool
	if r.sink == soakSinkJetStream {
		type key struct {
			subject string
			v       int64
		}
		seen := map[key]bool{}
		for _, o := range published {
			if o.counter {
				seen[key{o.subject, o.value}] = true
			}
		}
		wasPublished = func(subject string, v int64) bool { return seen[key{subject, v}] }
	}
	a := rrAuditCounters(obs, runs, wasPublished)
	res := &result{Runs: len(runs), Lost: a.Lost, Duplicated: a.Duplicated}
	static := "rr." + rrSource + "." + rrStatic
	var gaps, outages []float64
	refreshes, newSubs, transferred := 0, 0, 0
	for i, rs := range runs {
		var until time.Time
		if i+1 < len(runs) {
			until = runs[i+1].killAt
		}
		v := rrViewRun(rs, until, obs, published, static)
		if v.flowed {
			gaps, outages = append(gaps, ms(v.gap)), append(outages, ms(v.outage))
			res.addSwitch(v.gap)
			res.MaxGap = max(res.MaxGap, ms(v.silence))
		}
		if v.refresh {
			refreshes++
		}
		if v.newSub {
			newSubs++
		}
		if !v.refresh && !v.newSub {
			transferred++
		}
	}
	res.set("sink", r.sink)
	res.set("server", r.cfg.server)
	res.set("tags", len(r.target.counters))
	res.set("state_dir", r.stateDir)
	if r.cfg.queueSize > 0 {
		res.set("queue_size", r.cfg.queueSize)
	}
	res.set("reordered", a.Reordered)
	res.set("refreshes", refreshes)
	res.set("new_subscriptions", newSubs)
	res.set("transferred", transferred)
	if len(gaps) > 0 {
		res.set("restart_gap_ms_p50", percentile(gaps, 50))
		res.set("restart_gap_ms_p99", percentile(gaps, 99))
		res.set("outage_ms_p50", percentile(outages, 50))
		res.set("outage_ms_p99", percentile(outages, 99))
	}
	res.set("lost_at_restart", a.Lost-a.LostSteady)
	res.set("lost_steady", a.LostSteady)
	res.set("source_values_skipped", a.Skipped)
	res.set("lost_by_run", a.LostByRun)
	if wasPublished != nil {
		res.set("lost_published", a.LostPublished)
	}
	res.set("counter_values_checked", a.Counted)
	res.set("updates", stored)
	res.set("relay_refreshes", relayRefreshes)
	if transfersFound {
		res.set("relay_transfers", relayTransfers)
	}
	if len(a.LostExamples) > 0 {
		res.set("lost_examples", a.LostExamples)
	}
	if len(a.SkippedExamples) > 0 {
		res.set("skipped_examples", a.SkippedExamples)
	}
	return res
}

func (r *rrRig) close() {
	if r.child != nil {
		r.child.stop()
	}
	if r.nc != nil {
		r.nc.Close()
	}
	if r.target != nil {
		r.target.close()
	}
	if r.cl != nil {
		r.cl.Close()
	}
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

// askRaw sends one command to the relay process and returns its answer
// as JSON: fields soakRelayStats does not name (a newer relay's) too.
func (c *soakChild) askRaw(cmd string) (map[string]any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.in == nil {
		return nil, fmt.Errorf("relay process: not running")
	}
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		return nil, fmt.Errorf("relay process: %w", err)
	}
	if !c.out.Scan() {
		return nil, fmt.Errorf("relay process ended: %v", c.out.Err())
	}
	var st map[string]any
	return st, json.Unmarshal(c.out.Bytes(), &st)
}
