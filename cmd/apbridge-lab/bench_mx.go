package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// The mx-* scenarios run the relay's MxAccess gateway source
// (bridge/mxsource) against mxsim's gateway simulator over real
// gRPC, publishing through the embedded NATS cluster to a consumer
// subscribed to the tag subjects. Fields are described in
// docs/benchmarks.md.
func mxScenarios() []scenario {
	return []scenario{
		{"mx-storm", "244 tags, one gateway wedged 60 s from the first subscribe: subscribe requests, most in flight, recovery; then commands per subscribe with and without bulk-subscribe-supervisory (one run, ~2.5 min; --storm is the observation window)", benchMxStorm},
		{"mx-failover", "gateway pair, --tags (100) counters at 10 Hz, --mode warm|hot: kill the active, switch time on the consumer, lost and duplicated ticks (pass --runs 10 for the reported figure)", benchMxFailover},
		{"mx-restart", "one gateway, --tags (100) counters at 10 Hz: a graceful stream end, then a kill and restart; Good again and resubscribes per event", benchMxRestart},
		{"mx-throughput", "10,000 tags on one gateway at the highest rate the relay sustains (found by a short ladder), against plain nats.go; --duration, 15 s at its 60 s default (one run)", benchMxThroughput},
	}
}

const (
	mxDefaultTags = 100
	mxTick        = 100 * time.Millisecond
	// mxMaxRate caps the updates/s the failover and restart scenarios
	// offer, well below what the relay sustains (mx-throughput), so that
	// they measure the switch and not a relay falling behind.
	mxMaxRate = 20000
)

// mxTickFor is the counters' period for n tags: 100 ms (10 Hz), slower
// where n tags at 10 Hz would offer more than mxMaxRate updates/s.
func mxTickFor(n int) time.Duration {
	return max(mxTick, time.Duration(n)*time.Second/mxMaxRate)
}

// mxMode maps --mode onto the source's standby modes: the flag's default
// parser takes the servicelevel modes, of which warm and hot are the
// gateway's too.
func mxMode(cfg benchConfig) (string, error) {
	switch cfg.mode {
	case "", uaclient.ModeWarm:
		return mxsource.ModeWarm, nil
	case uaclient.ModeHot:
		return mxsource.ModeHot, nil
	}
	return "", fmt.Errorf("--mode: %q is not a gateway mode (valid for mx-*: warm, hot)", cfg.mode)
}

// startMxGateway starts a simulated gateway over data that advertises what
// --gateway-caps says: with base, today's nine capabilities only, so that
// the relay runs without apbridge's own (event resume, ping, heartbeats)
// and without the supervisory bulk subscribe.
func startMxGateway(cfg benchConfig, data *mxsim.Data) (*mxsim.Gateway, error) {
	gw, err := mxsim.Start(data, mxsim.WithLogger(cfg.log))
	if err != nil {
		return nil, err
	}
	if cfg.gatewayCaps == "base" {
		gw.SetCapabilities(mxsim.BaseCapabilities())
	}
	return gw, nil
}

// mxCounterTags names the tags of the items RunCounters(prefix, n, ...)
// drives: tag prefixI on item prefixI.Value.
func mxCounterTags(prefix string, n int) []bridge.TagConfig {
	tags := make([]bridge.TagConfig, n)
	for i := range tags {
		tags[i] = bridge.TagConfig{Name: prefix + strconv.Itoa(i), Address: prefix + strconv.Itoa(i) + ".Value"}
	}
	return tags
}

// mxSubscribeCommands sums the gateway's subscribe commands of every kind.
func mxSubscribeCommands(st mxsim.Stats) uint64 {
	c := st.CommandsByKind
	return c["SubscribeBulk"] + c["AddItemBulk"] + c["AdviseSupervisory"] + c["AdviseItemBulk"]
}

// countingSource wraps a source and counts the Subscribe calls running at
// once: the bridge's guard promises one.
type countingSource struct {
	bridge.Source
	mu      sync.Mutex
	running int
	maxRun  int
	calls   int
	first   time.Time // the first call
}

func newCountingSource(src bridge.Source) *countingSource {
	return &countingSource{Source: src}
}

func (c *countingSource) Subscribe(ctx context.Context, tags []bridge.Tag) ([]error, error) {
	c.mu.Lock()
	c.running++
	c.calls++
	c.maxRun = max(c.maxRun, c.running)
	if c.first.IsZero() {
		c.first = time.Now()
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running--
		c.mu.Unlock()
	}()
	return c.Source.Subscribe(ctx, tags)
}

// SubscribeReplyBound passes the wrapped source's reply bound on: a
// wrapper must not hide it, or the guard presumes replies lost sooner
// than without the wrapper (0: the guard's own ceiling).
func (c *countingSource) SubscribeReplyBound() time.Duration {
	if rb, ok := c.Source.(bridge.ReplyBounder); ok {
		return rb.SubscribeReplyBound()
	}
	return 0
}

func (c *countingSource) counts() (calls, maxRunning int, first time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.maxRun, c.first
}

// mxConsumer is the NATS consumer of one source's tag subjects. It reads
// each update's counter value, quality and refresh mark, counts lost and
// repeated ticks per tag, and, from a mark on, notes each tag's first Good
// update that is new.
type mxConsumer struct {
	index map[string]int

	mu      sync.Mutex
	updates uint64
	last    []int64
	seen    []bool
	lost    uint64
	dup     uint64
	repeats uint64 // snapshot values that repeat the tag's last tick: not duplicates
	// snap marks the tags whose next repeat of their last tick is a new
	// session's first value (see allowSnapshot).
	snap []bool
	bad  uint64 // updates that were not Good
	// The longest time between two Good updates of tag 0.
	lastGood0 time.Time
	maxGap0   time.Duration
	// From the mark on: an update is new when it is refresh-marked (a
	// promotion's snapshot) or carries a value above newer (any update
	// when newer < 0). firstNew is the first new update; good holds each
	// tag's first Good update with a value above newer.
	since    time.Time
	newer    int64
	firstNew time.Time
	good     []time.Time
	goodN    int
	changed  chan struct{}
}

// newMxConsumer subscribes nc to the subjects of tags on source.
func newMxConsumer(nc *nats.Conn, source string, tags []bridge.TagConfig) (*mxConsumer, error) {
	c := &mxConsumer{index: map[string]int{}, last: make([]int64, len(tags)), seen: make([]bool, len(tags)), snap: make([]bool, len(tags)),
		good: make([]time.Time, len(tags)), changed: make(chan struct{}, 1)}
	for i, t := range tags {
		c.index["apbridge."+source+"."+t.Name] = i
	}
	if err := subscribeAll(nc, "apbridge."+source+".>", c.handle); err != nil {
		return nil, err
	}
	c.mark(time.Now(), -1)
	return c, nil
}

// subscribeAll subscribes h to subj without a client-side pending limit,
// and waits until the broker has the subscription.
func subscribeAll(nc *nats.Conn, subj string, h nats.MsgHandler) error {
	sub, err := nc.Subscribe(subj, h)
	if err != nil {
		return err
	}
	sub.SetPendingLimits(-1, -1)
	return nc.Flush()
}

var valueKey = []byte(`"value":`)

// counterValue reads the value of an update of an integer tag: int64 is
// a JSON string ("42"), smaller integers a number.
func counterValue(data []byte) (int64, bool) {
	i := bytes.Index(data, valueKey)
	if i < 0 {
		return 0, false
	}
	rest := data[i+len(valueKey):]
	rest = bytes.TrimPrefix(rest, []byte{'"'})
	end := bytes.IndexAny(rest, `",}`)
	if end < 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return v, err == nil
}

func (c *mxConsumer) handle(m *nats.Msg) {
	now := time.Now()
	i, ok := c.index[m.Subject]
	if !ok {
		return
	}
	good := m.Header.Get(wire.HeaderQuality) == "Good"
	refresh := m.Header.Get(wire.HeaderRefresh) == "true"
	v, isInt := counterValue(m.Data)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates++
	if !good {
		c.bad++
	}
	if i == 0 && good {
		if !c.lastGood0.IsZero() {
			c.maxGap0 = max(c.maxGap0, now.Sub(c.lastGood0))
		}
		c.lastGood0 = now
	}
	if isInt {
		last := c.last[i]
		if c.seen[i] {
			switch {
			case v > last+1:
				c.lost += uint64(v - last - 1)
			case v <= last && refresh, v == last && c.snap[i]:
				c.repeats++
				c.snap[i] = false
			case v <= last:
				c.dup++
			}
		}
		if !c.seen[i] || v > last {
			c.last[i] = v
		}
		c.seen[i] = true
	}
	if now.Before(c.since) {
		return
	}
	fresh := c.newer < 0 || (isInt && v > c.newer)
	if (fresh || refresh) && c.firstNew.IsZero() {
		c.firstNew = now
	}
	if good && fresh && c.good[i].IsZero() {
		c.good[i] = now
		c.goodN++
	}
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// mark starts a watch at since: from then on, an update is new if it
// carries a value above newer (any update when newer < 0) or is part of a
// refresh.
func (c *mxConsumer) mark(since time.Time, newer int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since, c.newer = since, newer
	c.firstNew = time.Time{}
	clear(c.good)
	c.goodN = 0
}

// allowSnapshot takes the next repeat of each tag's last tick for a new
// session's first value, as the bridge's refresh is: a session starts
// each item with its current value, which may be the tick the old one
// delivered last. The bridge marks that as a refresh only after a
// switch.
func (c *mxConsumer) allowSnapshot() {
	c.mu.Lock()
	for i := range c.snap {
		c.snap[i] = true
	}
	c.mu.Unlock()
}

// setNewer changes the value above which an update is new, keeping the
// watch's start: for a fault whose last old value is known only after it.
func (c *mxConsumer) setNewer(newer int64) {
	c.mu.Lock()
	c.newer = newer
	c.mu.Unlock()
}

// waitAllGood waits until every tag has had a new Good update since the
// mark and returns when the last of them arrived.
func (c *mxConsumer) waitAllGood(ctx context.Context, limit time.Duration) (time.Time, error) {
	var last time.Time
	err := c.await(ctx, limit, func() bool {
		if c.goodN < len(c.good) {
			return false
		}
		for _, t := range c.good {
			if t.After(last) {
				last = t
			}
		}
		return true
	})
	if err != nil {
		c.mu.Lock()
		n, all := c.goodN, len(c.good)
		c.mu.Unlock()
		return time.Time{}, fmt.Errorf("%d of %d tags had a new Good update: %w", n, all, err)
	}
	return last, nil
}

// waitFirstNew waits for the first new update since the mark.
func (c *mxConsumer) waitFirstNew(ctx context.Context, limit time.Duration) (time.Time, error) {
	var at time.Time
	err := c.await(ctx, limit, func() bool { at = c.firstNew; return !at.IsZero() })
	return at, err
}

// await waits, up to limit, until done (called with c.mu held) is true.
func (c *mxConsumer) await(ctx context.Context, limit time.Duration, done func() bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		c.mu.Lock()
		ok := done()
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-c.changed:
		case <-poll.C:
		case <-deadline.C:
			return fmt.Errorf("timed out after %v", limit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type mxCounts struct {
	updates, lost, dup, repeats, bad uint64
	maxGap0                          time.Duration
}

func (c *mxConsumer) counts() mxCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return mxCounts{c.updates, c.lost, c.dup, c.repeats, c.bad, c.maxGap0}
}

// mxRelay is a relay with one gateway source and its consumer.
type mxRelay struct {
	src  *mxsource.Source
	wrap *countingSource // nil unless asked for
	rl   *relay.Relay
	nc   *nats.Conn
	con  *mxConsumer

	evMu   sync.Mutex
	events []mxsource.Event
}

// mxRelayOpts are the choices of startMxRelay beyond the source's config.
type mxRelayOpts struct {
	count bool                  // wrap the source in a countingSource
	guard relay.SubscribeConfig // zero: the bridge's defaults
	// handler, if set, receives the tag subjects' messages instead of an
	// mxConsumer (con is nil then).
	handler nats.MsgHandler
}

// startMxRelay subscribes a consumer to the tags' subjects, then starts a
// relay on cl whose one source, name, is an mxsource on the gateways.
func startMxRelay(ctx context.Context, cfg benchConfig, cl *natstest.Cluster, name string,
	mc mxsource.Config, tags []bridge.TagConfig, o mxRelayOpts) (*mxRelay, error) {
	r := &mxRelay{}
	var err error
	r.nc, err = nats.Connect(cl.Node(len(cl.Nodes())-1).URL(), cl.ClientOptions()...)
	if err != nil {
		return nil, err
	}
	if o.handler != nil {
		err = subscribeAll(r.nc, "apbridge."+name+".>", o.handler)
	} else {
		r.con, err = newMxConsumer(r.nc, name, tags)
	}
	if err != nil {
		r.nc.Close()
		return nil, err
	}
	r.src, err = mxsource.New(name, mc, mxsource.WithLogger(cfg.log), mxsource.WithEventHandler(func(e mxsource.Event) {
		r.evMu.Lock()
		r.events = append(r.events, e)
		r.evMu.Unlock()
	}))
	if err != nil {
		r.nc.Close()
		return nil, err
	}
	var src bridge.Source = r.src
	if o.count {
		r.wrap = newCountingSource(r.src)
		src = r.wrap
	}
	r.rl, err = relay.Start(ctx, &relay.Config{NATS: relay.NATSConfig{Servers: cl.URLs()}, Subscribe: o.guard},
		relay.WithNATSOptions(cl.ClientOptions()...), relay.WithLogger(cfg.log), relay.WithSource(src, tags))
	if err != nil {
		r.src.Close()
		r.nc.Close()
		return nil, err
	}
	return r, nil
}

// switches returns the source's switch events so far.
func (r *mxRelay) switches() []mxsource.Event {
	r.evMu.Lock()
	defer r.evMu.Unlock()
	var out []mxsource.Event
	for _, e := range r.events {
		if e.Kind == mxsource.EventSwitch {
			out = append(out, e)
		}
	}
	return out
}

// lastUp returns when the source's last session opened.
func (r *mxRelay) lastUp() time.Time {
	r.evMu.Lock()
	defer r.evMu.Unlock()
	for _, e := range slices.Backward(r.events) {
		if e.Kind == mxsource.EventSessionUp {
			return e.At
		}
	}
	return time.Time{}
}

// stats returns the bridge's counters of the relay's one source.
func (r *mxRelay) stats() bridge.SourceStats {
	for _, s := range r.rl.Bridge().Stats() {
		return s
	}
	return bridge.SourceStats{}
}

func (r *mxRelay) close() {
	r.rl.Close() // closes the source too
	r.nc.Close()
}

// mxCounterValue is the value the counters of RunCounters(prefix, ...)
// hold now.
func mxCounterValue(data *mxsim.Data, prefix string) int64 {
	v, _, _, _ := data.Get(prefix + "0.Value")
	n, _ := v.(int64)
	return n
}

// sleepCtx sleeps d unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error { return ctxtime.Sleep(ctx, d) }
