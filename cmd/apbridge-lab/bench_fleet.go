package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The fleet benchmarks: relays of one fleet on the embedded 3-node cluster
// with JetStream, 12 pairs of 4 tags ticking at 20 Hz (960 updates/s),
// the JetStream sink, lease TTL 3 s.
const (
	fleetPairs  = 12
	fleetTags   = 4
	fleetPeriod = 50 * time.Millisecond
	fleetTTL    = 3 * time.Second
	fleetDwell  = time.Second
)

func fleetScenarios() []scenario {
	return []scenario{
		{"fleet-failover", "3 relays, 12 pairs, lease TTL 3 s: one relay killed without handing over; takeover time, stream audited", benchFleetFailover},
		{"fleet-rebalance", "3 relays, 12 pairs: a 4th joins; pairs moved, longest time a pair had no owner, stream audited", benchFleetRebalance},
		{"fleet-handover", "3 relays, 12 pairs: one shuts down gracefully; time until its pairs are owned again, stream audited", benchFleetHandover},
		{"fleet-kv-leader", "3 relays, 12 pairs: the node leading the lease bucket's stream is killed; ownership changes", benchFleetKVLeader},
	}
}

// fleetBench is one run: a plant, a bucket and a stream of its own, relays.
type fleetBench struct {
	cl     *natstest.Cluster
	cfg    benchConfig
	plant  *fleetPlant
	bucket string
	stream string
	relays []*fleetRelay
	smp    *ownSampler
	// fault is when the scenario's event happened: unserved updates are
	// counted from then on (the start has its own, before placement).
	fault time.Time
}

// fleetRelay is a relay of the bench, behind proxies of its own so that it
// can be cut off from the cluster as a dead process is.
type fleetRelay struct {
	id      string
	r       *relay.Relay
	proxies []*faultproxy.Proxy
	stopped bool
	killed  bool
}

func newFleetBench(cl *natstest.Cluster, cfg benchConfig, run int) *fleetBench {
	b := &fleetBench{cl: cl, cfg: cfg, plant: newFleetPlant(fleetPairs, fleetTags),
		bucket: fmt.Sprintf("fleet_%d", run), stream: fmt.Sprintf("FLEET_%d", run)}
	b.smp = newOwnSampler(b)
	return b
}

// start starts relay id.
func (b *fleetBench) start(ctx context.Context, id string) error {
	fr := &fleetRelay{id: id}
	var urls []string
	for _, n := range b.cl.Nodes() {
		p, err := faultproxy.New(n.DirectURL()[len("nats://"):])
		if err != nil {
			return err
		}
		fr.proxies = append(fr.proxies, p)
		urls = append(urls, "nats://"+p.Addr())
	}
	off := ""
	c := &relay.Config{
		Instance: id, HTTP: relay.HTTPConfig{Listen: &off},
		NATS:       relay.NATSConfig{Servers: urls},
		Service:    relay.ServiceConfig{Prefix: "fleetbench." + id},
		SinkConfig: relay.SinkConfig{Sink: relay.SinkJetStream, JetStream: jetstreamsink.Config{Stream: b.stream, Replicas: 3}},
		Fleet:      &relay.FleetConfig{RelayID: id, Bucket: b.bucket, LeaseTTL: fleetTTL, Dwell: fleetDwell},
	}
	// Only through its proxies: a relay cut off must not find the nodes
	// through the servers the cluster advertises.
	opts := []relay.Option{relay.WithNATSOptions(append(b.cl.ClientOptions(), nats.IgnoreDiscoveredServers())...), relay.WithLogger(b.cfg.log)}
	for _, p := range b.plant.order {
		opts = append(opts, relay.WithSourceFactory(p, b.plant.tags, b.plant.factory(id, p)))
	}
	r, err := relay.Start(ctx, c, opts...)
	if err != nil {
		for _, p := range fr.proxies {
			p.Close()
		}
		return fmt.Errorf("relay %s: %w", id, err)
	}
	fr.r = r
	b.smp.mu.Lock()
	b.relays = append(b.relays, fr)
	b.smp.mu.Unlock()
	return nil
}

func (b *fleetBench) relay(id string) *fleetRelay {
	b.smp.mu.Lock()
	defer b.smp.mu.Unlock()
	for _, r := range b.relays {
		if r.id == id {
			return r
		}
	}
	return nil
}

// live returns the IDs of the relays not stopped or killed.
func (b *fleetBench) live() []string {
	b.smp.mu.Lock()
	defer b.smp.mu.Unlock()
	var out []string
	for _, r := range b.relays {
		if !r.stopped {
			out = append(out, r.id)
		}
	}
	return out
}

// kill cuts relay id off as a crashed process: its connections reset,
// new ones refused, its sources detached. Its goroutines are stopped by
// close at the end of the run.
func (b *fleetBench) kill(id string) {
	fr := b.relay(id)
	b.plant.kill(id)
	for _, p := range fr.proxies {
		p.Refuse()
		p.ResetAll()
	}
	b.smp.mu.Lock()
	fr.stopped, fr.killed = true, true
	b.smp.mu.Unlock()
}

// shutdown stops relay id gracefully (handing its pairs over).
func (b *fleetBench) shutdown(ctx context.Context, id string) error {
	fr := b.relay(id)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := fr.r.Shutdown(sctx)
	b.smp.mu.Lock()
	fr.stopped = true
	b.smp.mu.Unlock()
	return err
}

// settled reports whether every pair is owned by exactly its first-ranked
// live relay.
func (b *fleetBench) settled() bool {
	live := b.live()
	own := b.smp.now()
	for _, p := range b.plant.order {
		if len(own[p]) != 1 || own[p][0] != fleet.Rank(p, live)[0] {
			return false
		}
	}
	return true
}

func (b *fleetBench) waitSettled(ctx context.Context, what string) error {
	err := waitCond(ctx, what, 60*time.Second, b.settled)
	if err != nil {
		live := b.live()
		own := b.smp.now()
		for _, p := range b.plant.order {
			err = fmt.Errorf("%w; %s owned by %v, ranked %v", err, p, own[p], fleet.Rank(p, live))
		}
	}
	return err
}

// audit stops the plant, lets the live relays store what they took and
// compares the stream with the updates the plant handed to a relay.
func (b *fleetBench) audit(ctx context.Context) (natstest.StreamAudit, int, error) {
	b.plant.stop()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var subj func(pair, tag string) string
	for _, id := range b.live() {
		fr := b.relay(id)
		if err := fr.r.JetStream().Flush(fctx); err != nil {
			return natstest.StreamAudit{}, 0, fmt.Errorf("flush %s: %w", id, err)
		}
		if subj == nil {
			br := fr.r.Bridge()
			subj = func(pair, tag string) string { s, _ := br.Subject(pair, tag); return s }
		}
	}
	if subj == nil {
		return natstest.StreamAudit{}, 0, errors.New("no live relay")
	}
	nc, err := nats.Connect(b.cl.URLs()[0], append(b.cl.ClientOptions(), nats.MaxReconnects(-1))...)
	if err != nil {
		return natstest.StreamAudit{}, 0, err
	}
	defer nc.Close()
	stored, err := natstest.ReadStream(fctx, nc, b.stream)
	if err != nil {
		return natstest.StreamAudit{}, 0, fmt.Errorf("read the stream back: %w", err)
	}
	expected, unserved := b.plant.expected(subj, b.fault)
	return natstest.Audit(expected, stored), unserved, nil
}

// close stops everything of the run and deletes its stream and bucket.
func (b *fleetBench) close() {
	b.smp.stop()
	b.plant.stop()
	for _, fr := range b.relays {
		d := 5 * time.Second
		if fr.killed {
			d = 500 * time.Millisecond // it cannot reach anything
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		fr.r.Shutdown(ctx)
		cancel()
		for _, p := range fr.proxies {
			p.Close()
		}
	}
	if nc, err := nats.Connect(b.cl.URLs()[0], b.cl.ClientOptions()...); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if js, err := jetstream.New(nc); err == nil {
			js.DeleteStream(ctx, b.stream)
			js.DeleteKeyValue(ctx, b.bucket)
		}
		cancel()
		nc.Close()
	}
}

// startFleet starts n relays r1..rn and the plant, and waits until the
// pairs are placed.
func (b *fleetBench) startFleet(ctx context.Context, n int) error {
	for i := 1; i <= n; i++ {
		if err := b.start(ctx, fmt.Sprintf("r%d", i)); err != nil {
			return err
		}
	}
	b.smp.start()
	b.plant.run(fleetPeriod)
	if err := b.waitSettled(ctx, "the pairs to be placed"); err != nil {
		return err
	}
	return ctxtime.Sleep(ctx, 500*time.Millisecond)
}

// ownSampler samples, every millisecond, which relays may publish for each
// pair (their member's Valid), and keeps every change.
type ownSampler struct {
	b *fleetBench

	mu      sync.Mutex
	changes map[string][]ownChange
	cur     map[string][]string
	cancel  context.CancelFunc
	done    chan struct{}
}

type ownChange struct {
	at     time.Time
	owners []string
}

func newOwnSampler(b *fleetBench) *ownSampler {
	return &ownSampler{b: b, changes: map[string][]ownChange{}, cur: map[string][]string{}}
}

func (s *ownSampler) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
}

func (s *ownSampler) stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
		s.cancel = nil
	}
}

func (s *ownSampler) sample() {
	s.mu.Lock()
	relays := slices.Clone(s.b.relays)
	s.mu.Unlock()
	now := time.Now()
	own := map[string][]string{}
	for _, fr := range relays {
		m := fr.r.Fleet()
		if m == nil {
			continue
		}
		for _, p := range s.b.plant.order {
			if _, ok := m.Valid(p); ok {
				own[p] = append(own[p], fr.id)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.b.plant.order {
		if !slices.Equal(own[p], s.cur[p]) {
			s.changes[p] = append(s.changes[p], ownChange{now, own[p]})
		}
	}
	s.cur = own
}

// now returns the owners at the last sample.
func (s *ownSampler) now() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// firstOwnedBy returns when pair was first owned by one of ids at or
// after t.
func (s *ownSampler) firstOwnedBy(pair string, t time.Time, ids []string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.changes[pair] {
		if c.at.Before(t) {
			continue
		}
		for _, o := range c.owners {
			if slices.Contains(ids, o) {
				return c.at, true
			}
		}
	}
	return time.Time{}, false
}

// spans returns, over [from, to], the longest time pair had no owner and
// the total time it had two or more.
func (s *ownSampler) spans(pair string, from, to time.Time) (unowned, dual time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.changes[pair]
	for i, c := range cs {
		end := to
		if i+1 < len(cs) {
			end = cs[i+1].at
		}
		start := c.at
		if end.Before(from) || start.After(to) {
			continue
		}
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		switch d := end.Sub(start); {
		case len(c.owners) == 0:
			unowned = max(unowned, d)
		case len(c.owners) >= 2:
			dual += d
		}
	}
	return unowned, dual
}

// fleetTotals sums the runs of a fleet scenario.
type fleetTotals struct {
	times             []float64 // takeover or handover, per pair
	lost, dup, unserv uint64
	unownedMax, dual  time.Duration
	moved             []int
	changes           []uint64
}

func (t *fleetTotals) addAudit(a natstest.StreamAudit, unserved int) {
	t.lost += a.Lost
	t.dup += a.Duplicated
	t.unserv += uint64(unserved)
}

func (t *fleetTotals) result(runs int) *result {
	r := &result{Runs: runs, Lost: t.lost, Duplicated: t.dup}
	r.switchTimes = t.times
	return r
}

func runFleet(ctx context.Context, cfg benchConfig, once func(context.Context, *fleetBench, *fleetTotals, int) error) (*fleetTotals, error) {
	cl, err := startJSBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	t := &fleetTotals{}
	for run := 1; run <= cfg.runs; run++ {
		b := newFleetBench(cl, cfg, run)
		err := once(ctx, b, t, run)
		b.close()
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
	}
	return t, nil
}

// ownedAgain adds to t the time from t0 until one of by owned each of
// pairs, and returns the longest.
func (b *fleetBench) ownedAgain(pairs []string, t0 time.Time, by []string, t *fleetTotals) (time.Duration, error) {
	var worst time.Duration
	for _, p := range pairs {
		at, ok := b.smp.firstOwnedBy(p, t0, by)
		if !ok {
			return 0, fmt.Errorf("%s: not owned again by any of %v", p, by)
		}
		d := at.Sub(t0)
		worst = max(worst, d)
		t.times = append(t.times, ms(d))
	}
	return worst, nil
}

// settleAndAudit lets what is in flight be stored, audits the stream and
// adds the audit to t.
func (b *fleetBench) settleAndAudit(ctx context.Context, t *fleetTotals) (natstest.StreamAudit, int, error) {
	if err := ctxtime.Sleep(ctx, 500*time.Millisecond); err != nil {
		return natstest.StreamAudit{}, 0, err
	}
	a, unserved, err := b.audit(ctx)
	if err != nil {
		return a, 0, err
	}
	t.addAudit(a, unserved)
	return a, unserved, nil
}

func benchFleetFailover(ctx context.Context, cfg benchConfig) (*result, error) {
	t, err := runFleet(ctx, cfg, func(ctx context.Context, b *fleetBench, t *fleetTotals, run int) error {
		if err := b.startFleet(ctx, 3); err != nil {
			return err
		}
		victim := "r1"
		had := b.smp.now()
		var pairs []string
		for p, o := range had {
			if slices.Contains(o, victim) {
				pairs = append(pairs, p)
			}
		}
		t0 := time.Now()
		b.fault = t0
		b.kill(victim)
		if err := b.waitSettled(ctx, "the survivors to own every pair"); err != nil {
			return err
		}
		survivors := b.live()
		worst, err := b.ownedAgain(pairs, t0, survivors, t)
		if err != nil {
			return err
		}
		end := time.Now()
		for _, p := range b.plant.order {
			_, dual := b.smp.spans(p, t0, end)
			t.dual = max(t.dual, dual)
		}
		a, unserved, err := b.settleAndAudit(ctx, t)
		if err != nil {
			return err
		}
		fmt.Fprintf(cfg.progress, "  run %d: %s had %d pairs; last taken over after %.0f ms; stream: %d expected, %d stored, lost %d, duplicated %d; %d updates produced while no relay ran the pair\n",
			run, victim, len(pairs), ms(worst), a.Expected, a.Stored, a.Lost, a.Duplicated, unserved)
		return nil
	})
	if err != nil {
		return nil, err
	}
	r := t.result(cfg.runs)
	r.finish()
	r.set("takeover_ms_p50", r.SwitchP50)
	r.set("takeover_ms_p99", r.SwitchP99)
	r.set("takeover_ms_max", r.SwitchMax)
	r.set("dual_owner_ms", ms(t.dual))
	r.set("unserved", t.unserv)
	r.set("lease_ttl_ms", ms(fleetTTL))
	r.set("pairs_taken_over", len(t.times))
	return r, nil
}

func benchFleetRebalance(ctx context.Context, cfg benchConfig) (*result, error) {
	t, err := runFleet(ctx, cfg, func(ctx context.Context, b *fleetBench, t *fleetTotals, run int) error {
		if err := b.startFleet(ctx, 3); err != nil {
			return err
		}
		before := b.smp.now()
		t0 := time.Now()
		b.fault = t0
		if err := b.start(ctx, "r4"); err != nil {
			return err
		}
		if err := b.waitSettled(ctx, "the 4th relay to take its share"); err != nil {
			return err
		}
		end := time.Now()
		after := b.smp.now()
		moved := 0
		var unowned, dual time.Duration
		for _, p := range b.plant.order {
			if !slices.Equal(before[p], after[p]) {
				moved++
			}
			u, d := b.smp.spans(p, t0, end)
			unowned, dual = max(unowned, u), max(dual, d)
		}
		t.moved = append(t.moved, moved)
		t.unownedMax = max(t.unownedMax, unowned)
		t.dual = max(t.dual, dual)
		t.times = append(t.times, ms(end.Sub(t0)))
		a, _, err := b.settleAndAudit(ctx, t)
		if err != nil {
			return err
		}
		fmt.Fprintf(cfg.progress, "  run %d: %d pairs moved to r4 in %.0f ms; longest unowned %.0f ms; stream: %d expected, lost %d, duplicated %d\n",
			run, moved, ms(end.Sub(t0)), ms(unowned), a.Expected, a.Lost, a.Duplicated)
		return nil
	})
	if err != nil {
		return nil, err
	}
	r := t.result(cfg.runs)
	r.set("moved_max", slices.Max(t.moved))
	r.set("moved_allowed", (fleetPairs+3)/4+1)
	r.set("unowned_ms_max", ms(t.unownedMax))
	r.set("dual_owner_ms", ms(t.dual))
	r.set("unserved", t.unserv)
	r.set("settle_ms_note", "switch_ms_* here: from the 4th relay's start to every pair on its first-ranked relay (dwell 1 s)")
	return r, nil
}

func benchFleetHandover(ctx context.Context, cfg benchConfig) (*result, error) {
	t, err := runFleet(ctx, cfg, func(ctx context.Context, b *fleetBench, t *fleetTotals, run int) error {
		if err := b.startFleet(ctx, 3); err != nil {
			return err
		}
		victim := "r1"
		var pairs []string
		for p, o := range b.smp.now() {
			if slices.Contains(o, victim) {
				pairs = append(pairs, p)
			}
		}
		sort.Strings(pairs)
		survivors := []string{"r2", "r3"}
		t0 := time.Now()
		b.fault = t0
		if err := b.shutdown(ctx, victim); err != nil {
			return fmt.Errorf("shutdown %s: %w", victim, err)
		}
		if err := b.waitSettled(ctx, "the others to own every pair"); err != nil {
			return err
		}
		end := time.Now()
		worst, err := b.ownedAgain(pairs, t0, survivors, t)
		if err != nil {
			return err
		}
		for _, p := range b.plant.order {
			u, dual := b.smp.spans(p, t0, end)
			t.unownedMax, t.dual = max(t.unownedMax, u), max(t.dual, dual)
		}
		a, unserved, err := b.settleAndAudit(ctx, t)
		if err != nil {
			return err
		}
		fmt.Fprintf(cfg.progress, "  run %d: %s handed over %d pairs, the last owned again after %.0f ms; stream: %d expected, lost %d, duplicated %d; unserved %d\n",
			run, victim, len(pairs), ms(worst), a.Expected, a.Lost, a.Duplicated, unserved)
		return nil
	})
	if err != nil {
		return nil, err
	}
	r := t.result(cfg.runs)
	r.finish()
	r.set("handover_ms_p50", r.SwitchP50)
	r.set("handover_ms_p99", r.SwitchP99)
	r.set("handover_ms_max", r.SwitchMax)
	r.set("unowned_ms_max", ms(t.unownedMax))
	r.set("dual_owner_ms", ms(t.dual))
	r.set("unserved", t.unserv)
	return r, nil
}

func benchFleetKVLeader(ctx context.Context, cfg benchConfig) (*result, error) {
	t, err := runFleet(ctx, cfg, func(ctx context.Context, b *fleetBench, t *fleetTotals, run int) error {
		if err := b.startFleet(ctx, 3); err != nil {
			return err
		}
		count := func() uint64 {
			var n uint64
			for _, fr := range b.relays {
				s := fr.r.Fleet().Stats()
				n += s.Gained + s.Lost
			}
			return n
		}
		before := count()
		leader, err := b.cl.StreamLeader(ctx, "KV_"+b.bucket)
		if err != nil {
			return err
		}
		t0 := time.Now()
		leader.Kill()
		// Two TTLs: any lease whose renewals failed has been lost by then.
		if err := ctxtime.Sleep(ctx, 2*fleetTTL); err != nil {
			return err
		}
		changes := count() - before
		var unowned time.Duration
		for _, p := range b.plant.order {
			u, _ := b.smp.spans(p, t0, time.Now())
			unowned = max(unowned, u)
		}
		t.unownedMax = max(t.unownedMax, unowned)
		t.changes = append(t.changes, changes)
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err = leader.Restart(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("restart %s: %w", leader.Name(), err)
		}
		fmt.Fprintf(cfg.progress, "  run %d: killed %s (bucket leader): %d ownership changes in the next %v; longest unowned %.0f ms\n",
			run, leader.Name(), changes, 2*fleetTTL, ms(unowned))
		return nil
	})
	if err != nil {
		return nil, err
	}
	r := t.result(cfg.runs)
	r.set("ownership_changes", t.changes)
	r.set("unowned_ms_max", ms(t.unownedMax))
	return r, nil
}
