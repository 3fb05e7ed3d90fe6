package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/internal/nodeopcua"
	"github.com/apbridge/apbridge/internal/relaychild"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/nats-io/nats.go"
)

// ua-ingest's defaults: 10,000 tags changing 5 times a second, windows of
// 10 s, the relay's default publishing interval (and sampling interval,
// which defaults to it) for both clients.
const (
	ingestTags       = 10000
	ingestHz         = 5
	ingestWindow     = 10 * time.Second
	ingestPublishing = 100 * time.Millisecond
)

// ingestChild is one measured process of ua-ingest.
type ingestChild struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
}

// startIngestChild starts exe's ingest-child command and returns once it
// printed "ready" (every item has its first value).
func startIngestChild(ctx context.Context, exe, name string, args ...string) (*ingestChild, error) {
	cmd := exec.CommandContext(ctx, exe, append([]string{"ingest-child"}, args...)...)
	cmd.Stderr = os.Stderr
	// The lab's test binary runs the lab's commands with it (TestMain).
	in, out, err := startLabChild(cmd, 0)
	if err != nil {
		return nil, err
	}
	c := &ingestChild{name: name, cmd: cmd, in: in, out: out}
	if !c.out.Scan() || c.out.Text() != "ready" {
		c.close()
		return nil, fmt.Errorf("the %s process did not get ready: %q", name, c.out.Text())
	}
	return c, nil
}

// window asks the process to measure one window; summary reads it.
func (c *ingestChild) window() error {
	_, err := io.WriteString(c.in, "go\n")
	return err
}

func (c *ingestChild) summary() (relaychild.IngestSummary, error) {
	var s relaychild.IngestSummary
	if !c.out.Scan() {
		return s, fmt.Errorf("the %s process ended before its summary: %v", c.name, c.out.Err())
	}
	return s, json.Unmarshal(c.out.Bytes(), &s)
}

// close ends the process (at the end of its input) and waits for it.
func (c *ingestChild) close() error {
	c.in.Close()
	return c.cmd.Wait()
}

// benchUAIngest measures what an update costs the relay from OPC UA to
// NATS: cfg.tags (default 10,000) tags of one OPC UA server changing
// cfg.hz times a second (default 5) into the relay's process (core sink,
// the embedded cluster), beside a plain gopcua client process that
// subscribes the same items at the same intervals with gopcua's own
// subscription API and only counts, both at once on the same server, so
// that the ratio of their CPU per update is measured under the same load.
func benchUAIngest(ctx context.Context, cfg benchConfig) (*result, error) {
	tags, hz, window := cfg.tags, cfg.hz, ingestWindow
	if tags == 0 {
		tags = ingestTags
	}
	if cfg.durationSet {
		window = cfg.duration
	}
	period := time.Second / time.Duration(hz)
	exe, cleanup, err := relayBinary(ctx, cfg.relayBin)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	dir, err := os.MkdirTemp("", "apbridge-ua-ingest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	var endpoint string
	var names, nodes []string
	if cfg.server == serverNode {
		srv, err := nodeopcua.Start(ctx, nodeopcua.Config{Tags: tags, TagMs: int(period.Milliseconds()), CountEvery: 1})
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		ns, err := srv.NamespaceIndex(ctx, "urn:apbridge:interop")
		if err != nil {
			return nil, err
		}
		endpoint = srv.Endpoint
		for i := range tags {
			names = append(names, fmt.Sprintf("T%d", i))
			nodes = append(nodes, fmt.Sprintf("ns=%d;s=T%d", ns, i))
		}
	} else {
		pair, err := uaserver.StartPair(ctx, uaserver.WithTags(tags), uaserver.WithSetpoints(0), uaserver.WithTagInterval(period))
		if err != nil {
			return nil, err
		}
		defer pair.Close()
		endpoint = pair.A().Endpoint()
		for _, t := range pair.Tags() {
			names = append(names, t.Name)
			nodes = append(nodes, t.NodeID().String())
		}
	}
	cl, err := startBenchCluster(ctx, cfg, natstest.WithNodes(1))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	nc, err := nats.Connect(cl.URLs()[0])
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	var delivered atomic.Uint64
	sub, err := nc.Subscribe("apbridge.ingest.>", func(*nats.Msg) { delivered.Add(1) })
	if err != nil {
		return nil, err
	}
	sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		return nil, err
	}

	confPath, nodesPath := filepath.Join(dir, "apbridge.yaml"), filepath.Join(dir, "nodes.txt")
	if err := os.WriteFile(confPath, []byte(ingestRelayConfig(cfg.server, cl.URLs(), endpoint, names, nodes)), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(nodesPath, []byte(strings.Join(nodes, "\n")), 0o600); err != nil {
		return nil, err
	}
	common := []string{"--window", window.String()}
	relayArgs := append([]string{"--config", confPath}, common...)
	plainArgs := append([]string{"--plain", "--endpoint", endpoint, "--nodes", nodesPath,
		"--publishing", ingestPublishing.String(), "--sampling", ingestPublishing.String()}, common...)
	if cfg.childCPUProfiles != "" {
		relayArgs = append(relayArgs, "--cpuprofile", filepath.Join(cfg.childCPUProfiles, "ua-ingest-relay.pprof"),
			"--memprofile", filepath.Join(cfg.childCPUProfiles, "ua-ingest-relay.heap.pprof"))
		plainArgs = append(plainArgs, "--cpuprofile", filepath.Join(cfg.childCPUProfiles, "ua-ingest-plain.pprof"),
			"--memprofile", filepath.Join(cfg.childCPUProfiles, "ua-ingest-plain.heap.pprof"))
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fmt.Fprintf(cfg.progress, "  %d tags at %d Hz from %s: starting the relay and the plain gopcua client\n", tags, hz, cfg.server)
	rc, err := startIngestChild(sctx, exe, "relay", relayArgs...)
	if err != nil {
		return nil, err
	}
	defer rc.close()
	pc, err := startIngestChild(sctx, exe, "plain gopcua client", plainArgs...)
	if err != nil {
		return nil, err
	}
	defer pc.close()

	var relayCPU, plainCPU, ratios, relayRate, plainRate, deliveredRate []float64
	var last, lastPlain relaychild.IngestSummary
	for run := 1; run <= cfg.runs; run++ {
		d0 := delivered.Load()
		if err := rc.window(); err != nil {
			return nil, err
		}
		if err := pc.window(); err != nil {
			return nil, err
		}
		r, err := rc.summary()
		if err != nil {
			return nil, err
		}
		p, err := pc.summary()
		if err != nil {
			return nil, err
		}
		if r.Updates == 0 || p.Updates == 0 {
			return nil, fmt.Errorf("run %d: no updates in the window (relay %d, plain %d): see the relay's log above", run, r.Updates, p.Updates)
		}
		dr := float64(delivered.Load()-d0) / (float64(r.WindowMs) / 1000)
		rcu, pcu := float64(r.CPUUs)/float64(r.Updates), float64(p.CPUUs)/float64(p.Updates)
		rr, pr := float64(r.Updates)*1000/float64(r.WindowMs), float64(p.Updates)*1000/float64(p.WindowMs)
		relayCPU, plainCPU, ratios = append(relayCPU, rcu), append(plainCPU, pcu), append(ratios, rcu/pcu)
		relayRate, plainRate, deliveredRate = append(relayRate, rr), append(plainRate, pr), append(deliveredRate, dr)
		last, lastPlain = r, p
		fmt.Fprintf(cfg.progress, "  run %d: relay %.0f updates/s, %.2f µs CPU per update (%.1f%% of a core), RSS %.1f MiB; plain gopcua %.0f/s, %.2f µs (%.1f%%), RSS %.1f MiB; ratio %.2f\n",
			run, rr, rcu, float64(r.CPUUs)/float64(r.WindowMs)/10, r.RSS, pr, pcu, float64(p.CPUUs)/float64(p.WindowMs)/10, p.RSS, rcu/pcu)
	}
	res := &result{Runs: cfg.runs}
	res.set("server", cfg.server)
	res.set("tags", tags)
	res.set("hz", hz)
	res.set("updates_per_s", round0(percentile(relayRate, 50)))
	res.set("plain_updates_per_s", round0(percentile(plainRate, 50)))
	res.set("delivered_per_s", round0(percentile(deliveredRate, 50)))
	// The processes' own CPU (user and system, getrusage) over the
	// window, per update they handled in it: the median of the runs, and
	// the median of each run's ratio.
	res.set("cpu_us_per_update", round3(percentile(relayCPU, 50)))
	res.set("plain_cpu_us_per_update", round3(percentile(plainCPU, 50)))
	res.set("cpu_ratio", round3(percentile(ratios, 50)))
	res.set("relay_rss_mib", round3(last.RSS))
	res.set("relay_peak_rss_mib", round3(last.PeakRSS))
	res.set("relay_peak_heap_mib", round3(last.PeakHeap))
	res.set("plain_rss_mib", round3(lastPlain.RSS))
	res.set("plain_peak_rss_mib", round3(lastPlain.PeakRSS))
	return res, nil
}

// ingestRelayConfig is the relay's config of ua-ingest: one OPC UA source
// of the tags names at the addresses nodes on endpoint, at the publishing
// and sampling interval the plain client uses too.
func ingestRelayConfig(server string, natsURLs []string, endpoint string, names, nodes []string) string {
	pubMs := ingestPublishing.Milliseconds()
	var conf strings.Builder
	fmt.Fprintf(&conf, "http: {listen: \"\"}\nnats: {servers: [%s]}\nsources:\n  - name: ingest\n    endpoints: [%s]\n", strings.Join(natsURLs, ", "), endpoint)
	fmt.Fprintf(&conf, "    publishingIntervalMilliseconds: %d\n    samplingIntervalMilliseconds: %d\n", pubMs, pubMs)
	if server == serverNode && len(names) > 1000 {
		// node-opcua serves one request at a time on one thread: with
		// thousands of sampled items its answers, the health
		// subscription's and the ServiceLevel reads' too, stall past
		// the defaults (600 ms, 500 ms), and the relay took every stall
		// for a dead link, re-created its items on a new session and got
		// nothing. The tolerances docs/servicelevel.md gives for such a
		// server, as the sl-* scenarios use.
		conf.WriteString("    heartbeatTimeoutMilliseconds: 3000\n    readTimeoutMilliseconds: 3000\n")
	}
	conf.WriteString("    tags:\n")
	for i := range names {
		fmt.Fprintf(&conf, "      - {name: %s, address: %q}\n", names[i], nodes[i])
	}
	return conf.String()
}
