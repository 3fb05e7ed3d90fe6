package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// The config-change scenario's defaults: 10,000 tags at 10 Hz, a change
// that adds and removes a tenth of them and changes the monitoring of a
// hundredth.
const (
	ccTags   = 10000
	ccPeriod = 100 * time.Millisecond
	// ccSettle is how long after the apply the scenario watches the
	// untouched and the removed tags.
	ccSettle = 3 * time.Second
)

// Sources of config-change (--source).
const (
	sourceOPCUA = "opcua" // the embedded OPC UA Warm pair
	sourceMx    = "mx"    // a pair of simulated MxAccess gateways
)

// Ways a config change reaches the relay (--via).
const (
	viaAPI    = "api"    // the config service's apply, of a relay in this process
	viaSIGHUP = "sighup" // the apbridge binary, its file rewritten and SIGHUP sent
)

func configScenarios() []scenario {
	return []scenario{
		{"config-change", "10,000 tags at 10 Hz on the embedded Warm pair: a live change adds 1,000, removes 1,000, re-monitors 100 (--source opcua|mx, --via api|sighup, --tags N)", benchConfigChange},
	}
}

// ccPlan is the tags of one run: those of the first config, of the
// second, and what the change does to them.
type ccPlan struct {
	names     []string // every tag of the pair, in order
	addrs     []string // their node IDs
	n         int      // tags of the first config
	add, drop int      // tags added and removed
	remon     int      // tags whose monitoring changes (with mx, whose subject changes)
	// mx: the tags are a gateway pair's (--source mx), the pair's
	// endpoints in gateways.
	mx       bool
	gateways []string
}

func newCCPlan(pair *uaserver.Pair, n int) ccPlan {
	p := ccPlan{n: n, add: n / 10, drop: n / 10, remon: max(n/100, 1)}
	for _, tg := range pair.Tags() {
		p.names = append(p.names, tg.Name)
		p.addrs = append(p.addrs, tg.NodeID().String())
	}
	return p
}

// newMxPlan is the plan on a gateway pair whose counters are named
// prefix0.Value, prefix1.Value, ...
func newMxPlan(gateways []string, prefix string, n int) ccPlan {
	p := ccPlan{n: n, add: n / 10, drop: n / 10, remon: max(n/100, 1), mx: true, gateways: gateways}
	for i := range n + n/10 {
		p.names = append(p.names, fmt.Sprintf("c%d", i))
		p.addrs = append(p.addrs, fmt.Sprintf("%s%d.Value", prefix, i))
	}
	return p
}

// kind says what the change does to tag i.
func (p ccPlan) kind(i int) string {
	switch {
	case i < p.drop:
		return "removed"
	case i < p.drop+p.remon:
		return "remonitored"
	case i < p.n:
		return "untouched"
	case i < p.n+p.add:
		return "added"
	}
	return ""
}

// yaml is the relay's config before (second false) or after the change.
func (p ccPlan) yaml(cl *natstest.Cluster, pair *uaserver.Pair, second bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "http: {listen: \"\"}\nnats: {servers: [%s]}\nsources:\n  - name: line1\n", strings.Join(cl.URLs(), ", "))
	if p.mx {
		fmt.Fprintf(&b, "    type: mxgateway\n    endpoints: [%s]\n    tags:\n", strings.Join(p.gateways, ", "))
		for i, name := range p.names {
			switch k := p.kind(i); {
			case k == "" || k == "added" && !second || k == "removed" && second:
			case k == "remonitored" && second:
				fmt.Fprintf(&b, "      - {name: %s, address: %s, subject: moved.%s}\n", name, p.addrs[i], name)
			default:
				fmt.Fprintf(&b, "      - {name: %s, address: %s}\n", name, p.addrs[i])
			}
		}
		return b.String()
	}
	fmt.Fprintf(&b, "    endpoints: [%s]\n    mode: warm\n", strings.Join(pair.Endpoints(), ", "))
	fmt.Fprintf(&b, "    publishingIntervalMilliseconds: %d\n    samplingIntervalMilliseconds: %d\n", ccPeriod.Milliseconds(), ccPeriod.Milliseconds())
	b.WriteString("    tags:\n")
	var remon []int
	for i, name := range p.names {
		k := p.kind(i)
		switch {
		case k == "" || k == "added" && !second || k == "removed" && second:
			continue
		case k == "remonitored" && second:
			remon = append(remon, i)
			continue
		}
		fmt.Fprintf(&b, "      - {name: %s, address: %q}\n", name, p.addrs[i])
	}
	if len(remon) > 0 {
		b.WriteString("    groups:\n      - queueSize: 4\n        tags:\n")
		for _, i := range remon {
			fmt.Fprintf(&b, "          - {name: %s, address: %q}\n", p.names[i], p.addrs[i])
		}
	}
	return b.String()
}

// ccTag is what the consumer saw of one tag.
type ccTag struct {
	lastSeq          uint64
	gaps             int
	lost             uint64
	refreshes        int       // updates in a refresh, after the apply
	firstGood        time.Time // after the apply
	lastAt           time.Time
	n, afterApply    int
	seenBeforeChange bool
}

// ccRecorder is the scenario's consumer.
type ccRecorder struct {
	mu      sync.Mutex
	tags    map[string]*ccTag
	t0      time.Time // the apply; zero before it
	refresh int       // refresh-start events after the apply
	// reasons are those events' reasons, and the refresh open when the
	// apply came (before) if one was.
	reasons []string
	open    string
}

func (c *ccRecorder) handle(m *nats.Msg) {
	now := time.Now()
	tag := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	seq, _ := strconv.ParseUint(m.Header.Get(wire.HeaderSeq), 10, 64)
	good := m.Header.Get(wire.HeaderQuality) == wire.QualityGood.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tags[tag]
	if t == nil {
		t = &ccTag{}
		c.tags[tag] = t
	}
	if t.lastSeq != 0 && seq != t.lastSeq+1 {
		t.gaps++
		if seq > t.lastSeq {
			t.lost += seq - t.lastSeq - 1
		}
	}
	t.lastSeq, t.lastAt = seq, now
	t.n++
	if c.t0.IsZero() {
		t.seenBeforeChange = true
		return
	}
	t.afterApply++
	if m.Header.Get(wire.HeaderRefresh) == "true" {
		t.refreshes++
	}
	if good && t.firstGood.IsZero() {
		t.firstGood = now
	}
}

func (c *ccRecorder) event(m *nats.Msg) {
	var ev struct{ Event, Reason string }
	if json.Unmarshal(m.Data, &ev) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ev.Event == "refresh-start" && c.t0.IsZero():
		c.open = ev.Reason
	case ev.Event == "refresh-end" && c.t0.IsZero():
		c.open = ""
	case ev.Event == "refresh-start":
		c.refresh++
		c.reasons = append(c.reasons, ev.Reason)
	}
}

// counts returns how many of the tags named have at least n updates.
func (c *ccRecorder) counts(names []string, n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for _, name := range names {
		if t := c.tags[name]; t != nil && t.n >= n {
			k++
		}
	}
	return k
}

func (c *ccRecorder) goodSince(names []string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for _, name := range names {
		if t := c.tags[name]; t != nil && !t.firstGood.IsZero() {
			k++
		}
	}
	return k
}

// ccRelay is the relay of one run, in this process or a child.
type ccRelay interface {
	// prepare readies config for apply, which the scenario times from
	// the moment an operator would ask: the API's clock starts at the
	// request that carries the config's text, SIGHUP's at the signal.
	// Both include reading, parsing and validating the config.
	prepare(config string) (apply func(context.Context) error, err error)
	stop()
}

// apiRelay is a relay in this process, changed through its config
// service (<prefix>.config.apply) as an operator's tool does: the
// request carries the file's text, which the relay parses, validates,
// diffs and applies before it answers.
type apiRelay struct {
	r  *relay.Relay
	nc *nats.Conn
}

func (a apiRelay) prepare(config string) (func(context.Context) error, error) {
	data := []byte(config)
	if limit := a.nc.MaxPayload(); int64(len(data)) > limit {
		return nil, fmt.Errorf("--tags: the config is %d bytes, over the server's max payload of %d bytes for one request (use fewer tags)", len(data), limit)
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		m, err := a.nc.RequestWithContext(ctx, wire.ConfigSubject(wire.DefaultPrefix, "apply"), data)
		if err != nil {
			return fmt.Errorf("config apply: %w", err)
		}
		var rep relay.ConfigReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			return fmt.Errorf("config apply: the reply: %w", err)
		}
		if !rep.OK {
			return fmt.Errorf("config apply refused: %s", strings.Join(rep.Errors, "; "))
		}
		return nil
	}, nil
}

func (a apiRelay) stop() { a.r.Close() }

// childRelay is `apbridge run` in a process of its own.
type childRelay struct {
	cmd   *exec.Cmd
	path  string
	lines chan string
	done  chan struct{}
}

func startChildRelay(ctx context.Context, exe, dir, config string) (*childRelay, error) {
	path := filepath.Join(dir, "apbridge.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	c := &childRelay{cmd: exec.Command(exe, "run", "--config", path), path: path,
		lines: make(chan string, 1024), done: make(chan struct{})}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody waits for this line
			}
		}
		c.cmd.Wait()
	}()
	if err := c.waitLine(ctx, "relay running", 60*time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// waitLine waits for a log line with message msg.
func (c *childRelay) waitLine(ctx context.Context, msg string, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case l := <-c.lines:
			if strings.Contains(l, `"message":"`+msg+`"`) {
				return nil
			}
			if strings.Contains(l, `"message":"config not applied"`) {
				return fmt.Errorf("the relay did not apply the config: %s", l)
			}
		case <-c.done:
			return fmt.Errorf("the relay exited before %q", msg)
		case <-t.C:
			return fmt.Errorf("no %q from the relay in %v", msg, d)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *childRelay) prepare(config string) (func(context.Context) error, error) {
	if err := os.WriteFile(c.path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			return err
		}
		return c.waitLine(ctx, "config applied", 60*time.Second)
	}, nil
}

func (c *childRelay) stop() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.cmd.Process.Kill()
		<-c.done
	}
}

func benchConfigChange(ctx context.Context, cfg benchConfig) (*result, error) {
	via := cmp.Or(cfg.via, viaAPI)
	if via != viaAPI && via != viaSIGHUP {
		return nil, fmt.Errorf("--via: %q is not valid (valid: %s, %s)", via, viaAPI, viaSIGHUP)
	}
	n := cmp.Or(cfg.tags, ccTags)
	if n < 100 {
		return nil, fmt.Errorf("--tags: %d is out of range for config-change (valid 100-20000)", n)
	}
	source := cmp.Or(cfg.source, sourceOPCUA)
	if source != sourceOPCUA && source != sourceMx {
		return nil, fmt.Errorf("--source: %q is not valid (valid: %s, %s)", source, sourceOPCUA, sourceMx)
	}
	cl, err := natstest.Start(ctx, natstest.WithNodes(1))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var (
		pair *uaserver.Pair
		p    ccPlan
	)
	if source == sourceMx {
		fmt.Fprintf(cfg.progress, "  starting the gateway pair with %d items\n", n+n/10)
		data := mxsim.NewData()
		stop := data.RunCounters("C_", n+n/10, ccPeriod)
		defer stop()
		var eps []string
		for range 2 {
			g, err := mxsim.Start(data)
			if err != nil {
				return nil, err
			}
			defer g.Close()
			eps = append(eps, g.Addr())
		}
		p = newMxPlan(eps, "C_", n)
	} else {
		fmt.Fprintf(cfg.progress, "  starting the Warm pair with %d tags\n", n+n/10)
		pair, err = uaserver.StartPair(ctx, uaserver.WithTags(n+n/10), uaserver.WithSetpoints(0), uaserver.WithTagInterval(ccPeriod),
			uaserver.WithServiceLevels(250, 90))
		if err != nil {
			return nil, err
		}
		defer pair.Close()
		p = newCCPlan(pair, n)
	}
	var exe, dir string
	if via == viaSIGHUP {
		var cleanup func()
		if exe, cleanup, err = relayBinary(ctx, cfg.relayBin); err != nil {
			return nil, err
		}
		defer cleanup()
		if dir, err = os.MkdirTemp("", "apbridge-config-change-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	nc, err := nats.Connect(cl.URLs()[0])
	if err != nil {
		return nil, err
	}
	defer nc.Close()

	res := &result{Runs: cfg.runs}
	var applyMs, addedMs, quietMs []float64
	var lost, gaps, refreshes, silent int
	for run := range cfg.runs {
		o, err := configChangeOnce(ctx, cfg, cl, pair, nc, p, via, exe, dir)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run+1, err)
		}
		fmt.Fprintf(cfg.progress, "  run %d: apply %.0f ms, added all good %.0f ms, removed quiet %.0f ms, untouched lost %d, gaps %d, refreshes %d\n",
			run+1, o.apply, o.added, o.quiet, o.lost, o.gaps, o.refreshes)
		applyMs, addedMs, quietMs = append(applyMs, o.apply), append(addedMs, o.added), append(quietMs, o.quiet)
		lost, gaps, refreshes, silent = lost+o.lost, gaps+o.gaps, refreshes+o.refreshes, silent+o.silent
	}
	res.set("source", source)
	res.set("via", via)
	res.set("tags", n)
	res.set("added", p.add)
	res.set("removed", p.drop)
	res.set("remonitored", p.remon)
	res.set("untouched_lost", lost+silent)
	res.set("untouched_refreshes", refreshes)
	res.set("untouched_seq_gaps", gaps)
	res.set("added_all_good_ms_p99", percentile(addedMs, 99))
	res.set("removed_quiet_ms_p99", percentile(quietMs, 99))
	res.set("apply_ms_p50", percentile(applyMs, 50))
	res.set("apply_ms_p99", percentile(applyMs, 99))
	return res, nil
}

// ccOutcome is one run's figures.
type ccOutcome struct {
	apply, added, quiet           float64
	lost, gaps, refreshes, silent int
}

func configChangeOnce(ctx context.Context, cfg benchConfig, cl *natstest.Cluster, pair *uaserver.Pair, nc *nats.Conn,
	p ccPlan, via, exe, dir string) (ccOutcome, error) {
	var o ccOutcome
	rec := &ccRecorder{tags: map[string]*ccTag{}}
	for _, subj := range []string{"apbridge.line1.>", "moved.>"} {
		sub, err := nc.Subscribe(subj, rec.handle)
		if err != nil {
			return o, err
		}
		defer sub.Unsubscribe()
		// No drop in the consumer: a gap must be the relay's.
		sub.SetPendingLimits(-1, -1)
	}
	evs, err := nc.Subscribe(wire.EventSubject(wire.DefaultPrefix, "line1"), rec.event)
	if err != nil {
		return o, err
	}
	defer evs.Unsubscribe()
	nc.Flush()

	var r ccRelay
	first := p.yaml(cl, pair, false)
	if via == viaSIGHUP {
		if r, err = startChildRelay(ctx, exe, dir, first); err != nil {
			return o, err
		}
	} else {
		c, err := relay.Parse([]byte(first))
		if err != nil {
			return o, err
		}
		rl, err := relay.Start(ctx, c, relay.WithLogger(cfg.log))
		if err != nil {
			return o, err
		}
		r = apiRelay{rl, nc}
	}
	defer r.stop()
	before := p.names[:p.n]
	if err := waitCond(ctx, "every tag's values before the change", 120*time.Second, func() bool { return rec.counts(before, 2) == len(before) }); err != nil {
		return o, fmt.Errorf("%w (%d of %d)", err, rec.counts(before, 2), len(before))
	}
	apply, err := r.prepare(p.yaml(cl, pair, true))
	if err != nil {
		return o, err
	}
	rec.mu.Lock()
	rec.t0 = time.Now()
	t0 := rec.t0
	rec.mu.Unlock()
	if err := apply(ctx); err != nil {
		return o, err
	}
	o.apply = ms(time.Since(t0))
	var added []string
	for i := p.n; i < p.n+p.add; i++ {
		added = append(added, p.names[i])
	}
	if err := waitCond(ctx, "the added tags' values", 60*time.Second, func() bool { return rec.goodSince(added) == len(added) }); err != nil {
		return o, fmt.Errorf("%w (%d of %d)", err, rec.goodSince(added), len(added))
	}
	if err := sleepCtx(ctx, time.Until(t0.Add(ccSettle))); err != nil {
		return o, err
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var lastAdded time.Time
	for i, name := range p.names[:p.n+p.add] {
		t := rec.tags[name]
		switch p.kind(i) {
		case "added":
			if t != nil {
				lastAdded = maxTime(lastAdded, t.firstGood)
			}
		case "removed":
			if t != nil && t.lastAt.After(t0) {
				o.quiet = max(o.quiet, ms(t.lastAt.Sub(t0)))
			}
		case "untouched":
			if t == nil || t.afterApply == 0 {
				o.silent++
				continue
			}
			o.lost += int(t.lost)
			o.gaps += t.gaps
			o.refreshes += t.refreshes
		}
	}
	o.refreshes += rec.refresh
	o.added = ms(lastAdded.Sub(t0))
	if rec.open != "" || len(rec.reasons) > 0 {
		// Not the change's doing as a rule, but the figures count it:
		// say where the refreshes came from.
		fmt.Fprintf(cfg.progress, "    refresh open at the apply: %q; refreshes after it: %q\n", rec.open, rec.reasons)
	}
	return o, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
