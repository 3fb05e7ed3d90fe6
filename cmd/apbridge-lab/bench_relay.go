package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

func relayScenarios() []scenario {
	return []scenario{
		{"relay-throughput", "simulated tags through the relay process to a NATS subscriber, against plain nats.go", benchRelayThroughput},
		{"relay-maintenance", "the demo's maintenance window with 1,000 tags at 10 Hz: lost, duplicated, gaps", benchRelayMaintenance},
		{"storm", "a source that never answers subscribes for 110 s: requests sent and most in flight", benchStorm},
	}
}

// counter counts what a subscriber receives and samples latency from the
// source timestamp header.
type counter struct {
	n   atomic.Uint64
	mu  sync.Mutex
	lat []float64
}

func (c *counter) handle(m *nats.Msg) {
	n := c.n.Add(1)
	if n%16 != 0 {
		return
	}
	ts, err := time.Parse(time.RFC3339Nano, m.Header.Get(wire.HeaderSourceTime))
	if err != nil {
		return
	}
	c.mu.Lock()
	c.lat = append(c.lat, ms(time.Since(ts)))
	c.mu.Unlock()
}

func (c *counter) reset() {
	c.n.Store(0)
	c.mu.Lock()
	c.lat = nil
	c.mu.Unlock()
}

// childRun is what one relay-child process did.
type childRun struct {
	received uint64
	elapsed  time.Duration
	cpu      time.Duration
	maxRSS   int64
	peakHeap float64 // MiB, sampled by the child
	peakSys  float64 // MiB the Go runtime took from the OS
	readyRSS float64 // MiB resident once subscribed, before publishing
	// The anonymous and file-backed parts of readyRSS, and the largest
	// anonymous resident set sampled while publishing.
	readyAnon, readyFile, peakAnon float64
	lat                            []float64
}

// runChild runs one relay-child process; memLimit, if set, is its
// GOMEMLIMIT.
func runChild(ctx context.Context, exe string, cl *natstest.Cluster, c *counter, memLimit string, args ...string) (childRun, error) {
	all := append([]string{"relay-child", "--nats", strings.Join(cl.URLs(), ",")}, args...)
	cmd := exec.CommandContext(ctx, exe, all...)
	if memLimit != "" {
		cmd.Env = append(os.Environ(), "GOMEMLIMIT="+memLimit)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return childRun{}, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return childRun{}, err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	if !sc.Scan() || sc.Text() != "ready" {
		cmd.Wait()
		return childRun{}, fmt.Errorf("relay child did not start: %q", sc.Text())
	}
	c.reset()
	start := time.Now()
	var summaryLine string
	for sc.Scan() {
		summaryLine = sc.Text()
	}
	if err := cmd.Wait(); err != nil {
		return childRun{}, fmt.Errorf("relay child: %w", err)
	}
	elapsed := time.Since(start)
	// Let what is in flight arrive.
	last := c.n.Load()
	for {
		time.Sleep(100 * time.Millisecond)
		if n := c.n.Load(); n == last {
			break
		} else {
			last = n
		}
	}
	var summary struct {
		PeakHeap  float64 `json:"peak_heap_inuse_mib"`
		PeakSys   float64 `json:"peak_go_sys_mib"`
		PeakRSS   float64 `json:"peak_rss_mib"`
		ReadyRSS  float64 `json:"ready_rss_mib"`
		ReadyAnon float64 `json:"ready_rss_anon_mib"`
		ReadyFile float64 `json:"ready_rss_file_mib"`
		PeakAnon  float64 `json:"peak_rss_anon_mib"`
	}
	json.Unmarshal([]byte(summaryLine), &summary)
	r := childRun{
		peakHeap:  summary.PeakHeap,
		peakSys:   summary.PeakSys,
		readyRSS:  summary.ReadyRSS,
		readyAnon: summary.ReadyAnon,
		readyFile: summary.ReadyFile,
		peakAnon:  summary.PeakAnon,
		received:  c.n.Load(),
		elapsed:   elapsed,
		cpu:       cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), // CPU time only; see peakRSS
		maxRSS:    int64(summary.PeakRSS * (1 << 20)),
	}
	c.mu.Lock()
	r.lat = slices.Clone(c.lat)
	c.mu.Unlock()
	return r, nil
}

// benchRelayThroughput runs the relay in a process of its own, with a
// simulated source of 10,000 tags, and a plain nats.go publisher of the same
// messages, both flat out for the same time, then the relay at a steady
// 50,000 updates/s for latency, CPU and memory.
func benchRelayThroughput(ctx context.Context, cfg benchConfig) (*result, error) {
	exe, cleanup, err := relayBinary(ctx, cfg.relayBin)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cl, err := startBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	sub, err := nats.Connect(cl.Node(2).URL(), cl.ClientOptions()...)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	var c counter
	s, err := sub.Subscribe("apbridge.sim.>", c.handle)
	if err != nil {
		return nil, err
	}
	s.SetPendingLimits(-1, -1)
	sub.Flush()
	const tags = 10000
	window := 10 * time.Second
	var plainRates, relayRates, plainCPU, relayCPU []float64
	var steady childRun
	var flatRSS, flatHeap, flatAnon, plainReadyRSS, plainReadyAnon float64
	for run := 1; run <= cfg.runs; run++ {
		plainArgs := []string{"--plain", "--tags", strconv.Itoa(tags), "--duration", window.String()}
		if cfg.childCPUProfiles != "" && run == cfg.runs {
			plainArgs = append(plainArgs, "--cpuprofile", filepath.Join(cfg.childCPUProfiles, "relay-throughput-plain.pprof"))
		}
		p, err := runChild(ctx, exe, cl, &c, cfg.childMemLimit, plainArgs...)
		if err != nil {
			return nil, err
		}
		flatArgs := []string{"--tags", strconv.Itoa(tags), "--duration", window.String()}
		if cfg.childProfile != "" && run == cfg.runs {
			// Flat out is where the relay's memory peaks.
			flatArgs = append(flatArgs, "--profile", cfg.childProfile)
		}
		if cfg.childCPUProfiles != "" && run == cfg.runs {
			flatArgs = append(flatArgs, "--cpuprofile", filepath.Join(cfg.childCPUProfiles, "relay-throughput-relay.pprof"))
		}
		r, err := runChild(ctx, exe, cl, &c, cfg.childMemLimit, flatArgs...)
		if err != nil {
			return nil, err
		}
		flatRSS = max(flatRSS, float64(r.maxRSS)/(1<<20))
		flatHeap = max(flatHeap, r.peakHeap)
		flatAnon = max(flatAnon, r.peakAnon)
		plainReadyRSS, plainReadyAnon = p.readyRSS, p.readyAnon
		pr := float64(p.received) / p.elapsed.Seconds()
		rr := float64(r.received) / r.elapsed.Seconds()
		plainRates = append(plainRates, pr)
		relayRates = append(relayRates, rr)
		rc, pc := cpuPerUpdate(r), cpuPerUpdate(p)
		relayCPU = append(relayCPU, rc)
		plainCPU = append(plainCPU, pc)
		fmt.Fprintf(cfg.progress, "  run %d: relay %.0f/s, plain %.0f/s (%.2f); CPU per update %.2f µs, plain %.2f µs; relay CPU %.0f%%, peak RSS %.1f MiB (anonymous %.1f, heap in use %.1f, Go runtime %.1f; %.1f when ready, of which anonymous %.1f; plain %.1f, anonymous %.1f)\n",
			run, rr, pr, rr/pr, rc, pc, 100*r.cpu.Seconds()/r.elapsed.Seconds(), float64(r.maxRSS)/(1<<20), r.peakAnon, r.peakHeap, r.peakSys, r.readyRSS, r.readyAnon, p.readyRSS, p.readyAnon)
	}
	steadyArgs := []string{"--tags", strconv.Itoa(tags), "--period", "200ms", "--duration", window.String()}
	steady, err = runChild(ctx, exe, cl, &c, cfg.childMemLimit, steadyArgs...)
	if err != nil {
		return nil, err
	}
	res := &result{Runs: cfg.runs}
	delivered := percentile(relayRates, 50)
	plain := percentile(plainRates, 50)
	res.set("tags", tags)
	res.set("delivered_per_s", round0(delivered))
	res.set("plain_per_s", round0(plain))
	res.set("ratio", round3(delivered/plain))
	// The process's user and system CPU (its whole life, startup
	// included) over the updates it published flat out: the relay's cost
	// per update beside plain nats.go's.
	res.set("cpu_us_per_update", round3(percentile(relayCPU, 50)))
	res.set("plain_cpu_us_per_update", round3(percentile(plainCPU, 50)))
	res.set("steady_offered_per_s", 50000)
	res.set("steady_delivered_per_s", round0(float64(steady.received)/steady.elapsed.Seconds()))
	if len(steady.lat) > 0 {
		res.set("latency_ms_p50", percentile(steady.lat, 50))
		res.set("latency_ms_p99", percentile(steady.lat, 99))
	}
	res.set("relay_cpu_percent", round0(100*steady.cpu.Seconds()/steady.elapsed.Seconds()))
	res.set("relay_rss_mib", round3(float64(steady.maxRSS)/(1<<20)))
	res.set("relay_peak_heap_mib", round3(steady.peakHeap))
	res.set("relay_go_sys_mib", round3(steady.peakSys))
	// Flat out, the heap holds the publishes the broker has not yet
	// confirmed (kept for replay: about 13 MB of messages after a GC at the
	// end of a run) and the garbage awaiting the next GC, whose share
	// follows GOGC and GOMEMLIMIT (passed on to the relay process).
	res.set("relay_flat_out_rss_mib", round3(flatRSS))
	// Resident once the 10,000 tags are subscribed, before the first
	// update: the relay's, and a process of the same binary that only
	// holds a nats.go connection and the subjects.
	res.set("relay_ready_rss_mib", round3(steady.readyRSS))
	res.set("plain_ready_rss_mib", round3(plainReadyRSS))
	res.set("relay_flat_out_heap_mib", round3(flatHeap))
	// The resident sets above split: the anonymous part (heap, stacks:
	// what the relay itself holds) apart from the file pages of the binary
	// (its code and read-only data, mapped from the page cache, shared and
	// reclaimable), which are the same whatever the relay does.
	res.set("relay_ready_rss_anon_mib", round3(steady.readyAnon))
	res.set("relay_ready_rss_file_mib", round3(steady.readyFile))
	res.set("plain_ready_rss_anon_mib", round3(plainReadyAnon))
	res.set("relay_rss_anon_mib", round3(steady.peakAnon))
	res.set("relay_flat_out_rss_anon_mib", round3(flatAnon))
	if cfg.childMemLimit != "" {
		res.set("relay_gomemlimit", cfg.childMemLimit)
	}
	return res, nil
}

// cpuPerUpdate is a child's CPU time per update received from it, in
// microseconds.
func cpuPerUpdate(r childRun) float64 {
	if r.received == 0 {
		return 0
	}
	return float64(r.cpu.Microseconds()) / float64(r.received)
}

func round0(f float64) float64 { return float64(int64(f + 0.5)) }
func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// benchStorm replays the subscribe-storm incident against the guard: a
// gateway whose subscribe requests were never answered, for 110 s, while
// the old client re-sent one every 5 s; here they are answered after.
func benchStorm(ctx context.Context, cfg benchConfig) (*result, error) {
	cl, err := natstest.Start(ctx, natstest.WithNodes(1))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	src := simsource.New("slow")
	src.HangSubscribes(true)
	tcs := make([]bridge.TagConfig, 244) // the incident's instance had 244 attributes
	for i := range tcs {
		tcs[i] = bridge.TagConfig{Name: fmt.Sprintf("Z28061.A%03d", i), Address: fmt.Sprintf("ns=1;s=A%03d", i)}
	}
	rl, err := startSimRelay(ctx, cl, cfg, src, tcs, relay.SinkConfig{})
	if err != nil {
		return nil, err
	}
	defer rl.Close()
	stormFor := cfg.storm
	fmt.Fprintf(cfg.progress, "  the source does not answer for %v ...\n", stormFor)
	if err := ctxtime.Sleep(ctx, stormFor); err != nil {
		return nil, err
	}
	requests, maxIn := src.Requests()
	// Positive control: once the source answers, every tag subscribes.
	src.HangSubscribes(false)
	deadline := time.Now().Add(90 * time.Second)
	for src.Subscribed() < len(tcs) {
		if time.Now().After(deadline) {
			return nil, errors.New("tags did not subscribe once the source answered")
		}
		if err := ctxtime.Sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	r := &result{Runs: 1}
	r.set("storm_s", stormFor.Seconds())
	r.set("subscribe_requests", requests)
	r.set("max_in_flight", maxIn)
	r.set("requests_before_fix", 22)
	r.set("recovered", true)
	return r, nil
}

// benchRelayMaintenance runs the demo's script (LDM of the relay's broker,
// graceful stop of the OPC UA primary and its return as standby, a broker
// kill) with 1,000 tags at 10 Hz, cfg.runs times.
func benchRelayMaintenance(ctx context.Context, cfg benchConfig) (*result, error) {
	r := &result{}
	var opcua []float64
	var maxGap time.Duration
	var outOfOrder uint64
	for run := 1; run <= cfg.runs; run++ {
		d := newDemo(io.Discard)
		if err := runMaintenance(ctx, d, cfg.grace, 1000, cfg.log); err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		d.mu.Lock()
		r.Runs++
		r.Lost += d.lost
		r.Duplicated += d.dup
		outOfOrder += d.outOfOrder
		for _, sw := range d.natsSw {
			r.addSwitch(sw)
		}
		for _, sw := range d.opcuaSw {
			opcua = append(opcua, ms(sw))
		}
		maxGap = max(maxGap, d.maxGap)
		fmt.Fprintf(cfg.progress, "  run %d: %d updates, lost %d, duplicated %d, longest silence of a counter tag %v\n",
			run, d.n, d.lost, d.dup, d.maxGap.Round(time.Millisecond))
		d.mu.Unlock()
	}
	// A tag's longest silence, beyond its 100 ms period.
	r.MaxGap = ms(max(maxGap-100*time.Millisecond, 0))
	r.set("out_of_order", outOfOrder)
	if len(opcua) > 0 {
		r.set("opcua_failover_ms_p50", percentile(opcua, 50))
		r.set("opcua_failover_ms_max", percentile(opcua, 100))
	}
	r.set("tags", 1000)
	r.set("grace_ms", ms(cfg.grace))
	return r, nil
}

// relayBinary returns the apbridge binary whose hidden relay-child command
// relay-throughput runs: bin if set, else one built from this module now,
// removed by cleanup. The relay binary, not this lab, is measured: the
// lab links the embedded NATS and OPC UA servers, whose packages alone
// hold some 30 MiB resident in any process of it.
func relayBinary(ctx context.Context, bin string) (exe string, cleanup func(), err error) {
	if bin != "" {
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "apbridge-bench-")
	if err != nil {
		return "", nil, err
	}
	exe = filepath.Join(dir, "apbridge")
	build := exec.CommandContext(ctx, "go", "build", "-o", exe, "github.com/apbridge/apbridge/cmd/apbridge")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("relay-throughput measures the relay binary and could not build it (%v: %s); build it with go build ./cmd/apbridge and pass --relay-bin", err, strings.TrimSpace(string(out)))
	}
	return exe, func() { os.RemoveAll(dir) }, nil
}
