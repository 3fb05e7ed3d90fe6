package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/testcluster"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sinks of the soak (--sink).
const (
	soakSinkCore      = "core"
	soakSinkJetStream = "jetstream"
)

// labChildEnv, set in the environment of a process the lab starts, makes
// a test binary of this package run the lab's command line instead of its
// tests, so that the soak's relay process works under `go test` too.
const labChildEnv = "APBRIDGE_LAB_CHILD"

const (
	soakStream     = "SOAK"
	soakOPCUATags  = 40 // tags of the OPC UA pair (without --tags)
	soakGalaxyTags = 20 // counters of the gateway pair
	soakPeriod     = 100 * time.Millisecond
	// soakWholeWithin bounds how long the relay may take to be whole
	// again after a fault: both NATS connections, both sources on a
	// healthy server with a live standby, every counter flowing.
	soakWholeWithin = 60 * time.Second
)

func soakScenarios() []scenario {
	return []scenario{
		{"soak", "seeded random broker LDM/kill, OPC UA graceful stop/kill/frozen link, gateway restart/kill, repeated --cycles times under traffic; every update checked", benchSoak},
	}
}

// soakRig is what the soak runs on: the embedded cluster, an OPC UA pair,
// a gateway pair, the relay in a process of its own, and an independent
// subscriber that checks every update.
type soakRig struct {
	cfg      benchConfig
	rng      *rand.Rand
	cl       *testcluster.NATSCluster
	pair     *testcluster.OPCUAPair
	gws      [2]*testcluster.MxGateway
	stopData func()
	relay    *soakChild
	consumer *apconn.Conn
	check    *soakCheck
	where    atomic.Value // soakWhere: the fault under way
	counters []string     // subjects of the counter tags
	dir      string

	// windows are when each fault began, for the stream audit.
	mu      sync.Mutex
	windows []soakWindow
	// With the JetStream sink: every message ID the subscriber saw, by
	// subject, and the updates that repeated one (subject -> sequence
	// number -> ID). An update identical to one already sent (a refresh
	// repeating a tag's value after a switch) has the same ID, so the
	// stream stores it once.
	msgIDs  map[string]map[string]bool
	repeats map[string]map[uint64]string
}

type soakWindow struct {
	at    time.Time
	where soakWhere
}

func (r *soakRig) setWhere(w soakWhere) {
	r.where.Store(w)
	r.mu.Lock()
	r.windows = append(r.windows, soakWindow{time.Now(), w})
	r.mu.Unlock()
}

// whereAt is the fault that was under way at t.
func (r *soakRig) whereAt(t time.Time) soakWhere {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := soakWhere{kind: soakSteady}
	for _, win := range r.windows {
		if win.at.After(t) {
			break
		}
		w = win.where
	}
	return w
}

func benchSoak(ctx context.Context, cfg benchConfig) (_ *result, err error) {
	seed := cfg.seed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	fmt.Fprintf(cfg.progress, "  soak: %d cycles, sink %s, seed %d (replay with --seed %d)\n", cfg.cycles, cfg.sink, seed, seed)
	r := &soakRig{cfg: cfg, rng: rand.New(rand.NewPCG(uint64(seed), 0x50a4)), check: newSoakCheck()}
	r.where.Store(soakWhere{kind: soakSteady})
	defer r.close()
	defer func() {
		if r.dir != "" && err != nil {
			// Keep the relay's log and config for the replay.
			fmt.Fprintf(cfg.progress, "  the relay's log and config are kept in %s\n", r.dir)
			r.dir = ""
		}
	}()
	if err = r.start(ctx); err != nil {
		return nil, err
	}
	if err := r.waitWhole(ctx, "start"); err != nil {
		return nil, err
	}
	// Let the relay's memory reach its working size before it is measured.
	if err := ctxtime.Sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	start, err := r.relay.stats()
	if err != nil {
		return nil, err
	}
	faults := soakFaults()
	counts := map[string]int{}
	gaps := map[string][]float64{} // each fault's longest counter silence, by kind
	for cycle := 1; cycle <= cfg.cycles; cycle++ {
		order := r.rng.Perm(len(faults))
		var names []string
		for _, i := range order {
			names = append(names, faults[i].name)
		}
		fmt.Fprintf(cfg.progress, "  cycle %d: %s\n", cycle, strings.Join(names, ", "))
		for _, i := range order {
			f := faults[i]
			r.setWhere(soakWhere{f.name, cycle})
			r.check.fault(f.name)
			r.check.takeGap()
			err := f.run(r, ctx)
			if err == nil {
				err = r.waitWhole(ctx, f.name)
			}
			if err != nil {
				return nil, fmt.Errorf("cycle %d, %s (replay: --seed %d --cycles %d): %w", cycle, f.name, seed, cycle, err)
			}
			counts[f.name]++
			gaps[f.name] = append(gaps[f.name], ms(r.check.takeGap()))
			r.setWhere(soakWhere{soakSteady, cycle})
		}
	}
	end, err := r.relay.settledStats(ctx, start.Goroutines)
	if err != nil {
		return nil, err
	}
	return r.report(ctx, seed, counts, gaps, start, end)
}

// start brings everything up and starts the relay process.
func (r *soakRig) start(ctx context.Context) (err error) {
	cfg := r.cfg
	var copts []testcluster.Option
	if cfg.sink == soakSinkJetStream {
		copts = append(copts, testcluster.WithJetStream())
	}
	if r.cl, err = startBenchCluster(ctx, cfg, copts...); err != nil {
		return err
	}
	tags := soakOPCUATags
	if cfg.tags > 0 {
		tags = cfg.tags
	}
	if r.pair, err = testcluster.StartOPCUAPair(ctx, testcluster.WithTags(tags), testcluster.WithTagInterval(soakPeriod),
		testcluster.WithServiceLevels(testcluster.LevelPrimary, testcluster.LevelHealthyFollower)); err != nil {
		return err
	}
	data := testcluster.NewMxData()
	r.stopData = data.RunCounters("Galaxy_", soakGalaxyTags, soakPeriod)
	for i := range r.gws {
		if r.gws[i], err = testcluster.StartMxGateway(data); err != nil {
			return err
		}
	}
	if r.dir, err = os.MkdirTemp("", "apbridge-soak-"); err != nil {
		return err
	}
	path := filepath.Join(r.dir, "relay.yaml")
	if err := os.WriteFile(path, []byte(r.relayConfig()), 0o600); err != nil {
		return err
	}

	// The subscriber listens before the relay starts, not to miss its
	// first values.
	if r.consumer, err = apconn.Connect(ctx, r.cl.URLs(), apconn.WithName("soak-consumer")); err != nil {
		return err
	}
	sub, err := r.consumer.Subscribe("soak.>", r.update)
	if err != nil {
		return err
	}
	sub.SetPendingLimits(-1, -1)
	if err := r.consumer.Flush(ctx); err != nil {
		return err
	}
	r.relay, err = startSoakChild(ctx, path, filepath.Join(r.dir, "relay.log"), cfg.verbose)
	return err
}

// relayConfig is the relay's config file, as a site writes it.
func (r *soakRig) relayConfig() string {
	var b strings.Builder
	q := func(s string) string { j, _ := json.Marshal(s); return string(j) }
	fmt.Fprintf(&b, "instance: soak\nsubject: \"soak.{source}.{tag}\"\nhttp:\n  listen: \"\"\n")
	fmt.Fprintf(&b, "nats:\n  name: soak-relay\n  lameDuckHandling: SWITCH_TO_PASSIVE\n  servers:\n")
	for _, u := range r.cl.URLs() {
		fmt.Fprintf(&b, "    - %s\n", q(u))
	}
	if r.cfg.sink == soakSinkJetStream {
		fmt.Fprintf(&b, "sink: jetstream\njetstream:\n  stream: %s\n  subjects: [\"soak.>\"]\n  replicas: 3\n", soakStream)
	}
	fmt.Fprintf(&b, "sources:\n  - name: line1\n    type: opcua\n    publishingIntervalMilliseconds: 100\n    samplingIntervalMilliseconds: 100\n    endpoints:\n")
	for _, e := range r.pair.Endpoints() {
		fmt.Fprintf(&b, "      - %s\n", q(e))
	}
	b.WriteString("    tags:\n")
	for _, tg := range r.pair.Tags() {
		fmt.Fprintf(&b, "      - {name: %s, address: %s}\n", q(tg.Name), q(tg.NodeID().String()))
		if isCounter(tg.Name) {
			r.counters = append(r.counters, "soak.line1."+tg.Name)
		}
	}
	fmt.Fprintf(&b, "  - name: galaxy\n    type: mxgateway\n    endpoints: [%s, %s]\n    tags:\n", q(r.gws[0].Addr()), q(r.gws[1].Addr()))
	for i := range soakGalaxyTags {
		name := fmt.Sprintf("Galaxy_%d", i)
		fmt.Fprintf(&b, "      - {name: %s, address: %s}\n", q(name), q(name+".Value"))
		r.counters = append(r.counters, "soak.galaxy."+name)
	}
	return b.String()
}

// update is the independent subscriber's handler.
func (r *soakRig) update(m *nats.Msg) {
	u, err := bridge.DecodeJSON(m.Data)
	if err != nil {
		return
	}
	r.check.record(r.where.Load().(soakWhere), m.Subject, isCounter(u.Tag), u.Seq, u.Value, time.Now())
	if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
		r.mu.Lock()
		if r.msgIDs == nil {
			r.msgIDs, r.repeats = map[string]map[string]bool{}, map[string]map[uint64]string{}
		}
		ids := r.msgIDs[m.Subject]
		if ids == nil {
			ids = map[string]bool{}
			r.msgIDs[m.Subject] = ids
		}
		if ids[id] {
			if r.repeats[m.Subject] == nil {
				r.repeats[m.Subject] = map[uint64]string{}
			}
			r.repeats[m.Subject][u.Seq] = id
		}
		ids[id] = true
		r.mu.Unlock()
	}
}

func (r *soakRig) close() {
	if r.relay != nil {
		r.relay.stop()
	}
	if r.consumer != nil {
		r.consumer.Close()
	}
	for _, g := range r.gws {
		if g != nil {
			g.Close()
		}
	}
	if r.stopData != nil {
		r.stopData()
	}
	if r.pair != nil {
		r.pair.Close()
	}
	if r.cl != nil {
		r.cl.Close()
	}
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

// soakChild is the relay process and its stats line protocol.
type soakChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	log *os.File // its log, closed once it has ended
	mu  sync.Mutex
}

// startSoakChild starts the relay process on config. Its log (info level)
// goes to logPath, and with verbose to stderr too.
func startSoakChild(ctx context.Context, config, logPath string, verbose bool) (*soakChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "soak-relay", "--config", config, "-v")
	cmd.Env = append(os.Environ(), labChildEnv+"=1")
	cmd.Stderr = logFile
	if verbose {
		cmd.Stderr = io.MultiWriter(logFile, os.Stderr)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	c := &soakChild{cmd: cmd, in: in, out: bufio.NewScanner(out), log: logFile}
	c.out.Buffer(make([]byte, 1<<20), 1<<24)
	ready := make(chan bool, 1)
	go func() { ready <- c.out.Scan() && c.out.Text() == "ready" }()
	select {
	case ok := <-ready:
		if !ok {
			c.stop()
			return nil, errors.New("the relay process did not start (its log is above)")
		}
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	}
	return c, nil
}

// ask sends one command and reads its JSON answer.
func (c *soakChild) ask(cmd string) (soakRelayStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var st soakRelayStats
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		return st, fmt.Errorf("relay process: %w", err)
	}
	if !c.out.Scan() {
		return st, fmt.Errorf("relay process ended: %v", c.out.Err())
	}
	return st, json.Unmarshal(c.out.Bytes(), &st)
}

func (c *soakChild) state() (soakRelayStats, error) { return c.ask("state") }
func (c *soakChild) stats() (soakRelayStats, error) { return c.ask("stats") }

// settledStats waits (at most 15 s) for the relay's goroutines to come
// back to want, as the last fault's retries and timers end, and returns
// its stats then or at the deadline.
func (c *soakChild) settledStats(ctx context.Context, want int) (soakRelayStats, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := c.stats()
		if err != nil || st.Goroutines <= want || time.Now().After(deadline) {
			return st, err
		}
		if err := ctxtime.Sleep(ctx, 500*time.Millisecond); err != nil {
			return st, err
		}
	}
}

func (c *soakChild) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.in == nil {
		return
	}
	fmt.Fprintln(c.in, "stop")
	c.in.Close()
	c.in = nil
	wait := make(chan error, 1)
	go func() { wait <- c.cmd.Wait() }()
	select {
	case <-wait:
	case <-time.After(15 * time.Second):
		c.cmd.Process.Kill()
		<-wait
	}
	c.log.Close()
}
