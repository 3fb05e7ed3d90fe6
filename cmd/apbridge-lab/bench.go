package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apbridge/apbridge/internal/cli"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/rs/zerolog"
)

// benchConfig is what every scenario may read from the command line.
type benchConfig struct {
	runs int
	// queueSize is relay-restart's source queueSize (0: the relay's
	// default).
	queueSize int
	rtt       time.Duration
	tls       bool
	// server is where the sl-* scenarios run: serverEmbedded or serverNode.
	server string
	// tags is the number of tags of the sl-* scenarios; 0 means slTags.
	tags int
	// mode is the Pair's mode in the sl-* scenarios.
	mode uaclient.Mode
	// blip is how long sl-blip freezes the primary's link; 0 resets it
	// instead.
	blip time.Duration
	// gatewayCaps is what the mx-* scenarios' gateways advertise:
	// "full" (the simulator's default) or "base" (today's nine
	// capabilities, none of apbridge's own).
	gatewayCaps string
	// standbyLevel is the standby's ServiceLevel in the blip scenarios
	// (slFault.standbyFlag); the others keep the levels they are about.
	standbyLevel int
	// delay is how long after the primary's ServiceLevel 0 the standby
	// rises to 250 in sl-late-peer.
	delay    time.Duration
	grace    time.Duration
	duration time.Duration
	// durationSet: --duration was given (ua-ingest's window is 10 s
	// otherwise).
	durationSet bool
	rate        time.Duration
	// hz is how often ua-ingest's tags change.
	hz int
	// childCPUProfiles, if set, is the directory where the measured
	// processes of ua-ingest and relay-throughput write CPU profiles.
	childCPUProfiles string
	storm            time.Duration
	// childProfile, if set, is where the relay process of relay-throughput
	// writes a heap profile.
	childProfile string
	// relayBin is the apbridge binary relay-throughput runs; empty: build
	// one.
	relayBin string
	// childMemLimit, if set, is the GOMEMLIMIT of those processes.
	childMemLimit string
	// cycles, sink and seed are the soak's (bench_soak.go).
	cycles int
	sink   string
	seed   int64
	// runsSet and sinkSet say --runs and --sink were given: a scenario
	// with defaults of its own (relay-restart's) keeps them otherwise.
	runsSet, sinkSet bool
	// fleet runs the soak with three relays of one fleet (soak_fleet.go).
	fleet bool
	// handoff is fleet.handoff in the soak's relays (on, as the relay's
	// default is); handoffSet says --handoff was given.
	handoff, handoffSet bool
	// outage, wan, flap and wanRTT are the edge scenarios'
	// (bench_edge.go): how long the WAN is down, how (cut or freeze),
	// how long it flaps, and the latency it adds.
	outage time.Duration
	wan    string
	flap   time.Duration
	wanRTT time.Duration
	// hub is where the edge scenarios run the hub cluster (hubProcess,
	// hubInline), site the site's (siteProcess, siteInline), hubNice the
	// nice value of the hub's process, catchupRate the
	// cap on the site's source consumer in bits/s (0: none).
	hub         string
	site        string
	hubNice     int
	catchupRate uint64
	// dupWindow is the site stream's duplicate window (0: the sink's
	// default).
	dupWindow time.Duration
	// leafCompression is how the site's servers compress what they send
	// the hub (natstest.WithLeafCompression).
	leafCompression string

	// via is how config-change brings the change (viaAPI, viaSIGHUP),
	// source what relays the tags (sourceOPCUA, sourceMx).
	via, source string
	verbose     bool
	log         zerolog.Logger
	progress    io.Writer
}

// memLimitForm is what the Go runtime accepts in GOMEMLIMIT.
var memLimitForm = regexp.MustCompile(`^(off|[0-9]+(B|KiB|MiB|GiB|TiB)?)$`)

// scenario is one named benchmark.
type scenario struct {
	name string
	desc string
	run  func(ctx context.Context, cfg benchConfig) (*result, error)
}

// result is one scenario's figures. The JSON field names are read by other
// tools: keep them.
type result struct {
	Scenario    string  `json:"scenario"`
	Runs        int     `json:"runs"`
	SwitchP50   float64 `json:"switch_ms_p50"`
	SwitchP99   float64 `json:"switch_ms_p99"`
	SwitchMax   float64 `json:"switch_ms_max"`
	MaxGap      float64 `json:"max_gap_ms"`
	Lost        uint64  `json:"lost"`
	Duplicated  uint64  `json:"duplicated"`
	extra       []kv
	switchTimes []float64
}

type kv struct {
	key string
	val any
}

func (r *result) set(key string, val any) {
	for i := range r.extra {
		if r.extra[i].key == key {
			r.extra[i].val = val
			return
		}
	}
	r.extra = append(r.extra, kv{key, val})
}

// addSwitch records one run's switch time.
func (r *result) addSwitch(d time.Duration) {
	r.switchTimes = append(r.switchTimes, ms(d))
}

// finish computes the percentiles of the recorded switch times.
func (r *result) finish() {
	if len(r.switchTimes) == 0 {
		return
	}
	r.SwitchP50 = percentile(r.switchTimes, 50)
	r.SwitchP99 = percentile(r.switchTimes, 99)
	r.SwitchMax = slices.Max(r.switchTimes)
}

// MarshalJSON writes the fixed fields first, then the scenario's own.
func (r *result) MarshalJSON() ([]byte, error) {
	type fixed result
	b, err := json.Marshal((*fixed)(r))
	if err != nil {
		return nil, err
	}
	if len(r.extra) == 0 {
		return b, nil
	}
	var sb strings.Builder
	sb.Write(b[:len(b)-1])
	for _, e := range r.extra {
		v, err := json.Marshal(e.val)
		if err != nil {
			return nil, err
		}
		k, _ := json.Marshal(e.key)
		sb.WriteByte(',')
		sb.Write(k)
		sb.WriteByte(':')
		sb.Write(v)
	}
	sb.WriteByte('}')
	return []byte(sb.String()), nil
}

func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// percentile is the nearest-rank percentile of v.
func percentile(v []float64, p float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}

func scenarios() []scenario {
	var all []scenario
	all = append(all, natsScenarios()...)
	all = append(all, slScenarios()...)
	all = append(all, uaScenarios()...)
	all = append(all, relayScenarios()...)
	all = append(all, jsScenarios()...)
	all = append(all, mxScenarios()...)
	all = append(all, fleetScenarios()...)
	all = append(all, edgeScenarios()...)
	all = append(all, configScenarios()...)
	all = append(all, soakScenarios()...)
	all = append(all, relayRestartScenarios()...)
	return all
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object per scenario per line")
	cfg := benchConfig{}
	fs.IntVar(&cfg.runs, "runs", 5, "runs per scenario (1-1000; relay-restart: default 10)")
	fs.DurationVar(&cfg.rtt, "rtt", 0, "round-trip time added between clients and brokers by the fault proxy")
	fs.BoolVar(&cfg.tls, "tls", false, "serve TLS on the brokers' client ports")
	fs.IntVar(&cfg.queueSize, "queue-size", 0, "relay-restart: the source's queueSize in the relay's config, the samples each item's queue keeps while no relay runs (0: the relay's default; 1-65536)")
	mode := fs.String("mode", "warm", "the Pair's mode in the sl-* scenarios: warm, hot or prepared")
	fs.IntVar(&cfg.tags, "tags", 0, "tags of the sl-* scenarios (1-20000; default 16 on the embedded servers; with --server node, that many more beside its counter), of config-change (100-20000, default 10000) and the counters of relay-restart (1-1000, default 20)")
	fs.StringVar(&cfg.server, "server", serverEmbedded, "OPC UA servers of the sl-* scenarios and relay-restart: embedded (the project's test pair) or node (node-opcua, an implementation we did not write)")
	fs.DurationVar(&cfg.blip, "blip", 0, "sl-blip: freeze the primary's link this long, then heal it (0: reset the connection instead)")
	fs.StringVar(&cfg.gatewayCaps, "gateway-caps", "full", "mx-*: what the simulated gateways advertise: full, or base (today's nine capabilities: no event resume, ping or heartbeats, no supervisory bulk subscribe)")
	fs.IntVar(&cfg.standbyLevel, "standby-level", 90, "sl-blip, sl-long-blip: the standby's ServiceLevel (0-250) beside the primary's 250: 90 is a Warm standby, below the Healthy band, 240 a Healthy one; the other sl-* scenarios keep the levels they are about")
	fs.DurationVar(&cfg.delay, "delay", 500*time.Millisecond, "sl-late-peer: how long after the primary's ServiceLevel 0 the standby rises from 90 to 250 (0-1m)")
	fs.DurationVar(&cfg.grace, "grace", 2*time.Second, "lame-duck grace period of the brokers")
	fs.DurationVar(&cfg.duration, "duration", 60*time.Second, "length of the steady-state scenarios")
	fs.IntVar(&cfg.hz, "hz", ingestHz, "ua-ingest: how often each tag changes a second (1-50)")
	fs.DurationVar(&cfg.rate, "period", time.Millisecond, "publish period of the traffic (1ms = 1 kHz)")
	fs.DurationVar(&cfg.storm, "storm", 110*time.Second, "how long the storm scenario's source does not answer")
	fs.StringVar(&cfg.childProfile, "relay-profile", "", "heap profile of the relay process in relay-throughput's last flat-out run")
	fs.StringVar(&cfg.relayBin, "relay-bin", "", "relay-throughput: the apbridge binary to measure (default: built from this module with go build)")
	fs.StringVar(&cfg.childMemLimit, "relay-memlimit", "", "GOMEMLIMIT of the publishing processes of relay-throughput, e.g. 40MiB (default: inherited)")
	fs.IntVar(&cfg.cycles, "cycles", 3, "soak: cycles, each applying every fault kind once in a seeded random order (1-100000)")
	fs.StringVar(&cfg.sink, "sink", soakSinkCore, "soak, relay-restart: the relay's sink, core or jetstream (relay-restart: default jetstream)")
	fs.BoolVar(&cfg.fleet, "fleet", false, "soak: three relays of one fleet (lease TTL 3 s) on two OPC UA and two gateway pairs, and a relay kill among the faults; needs --sink jetstream")
	fs.BoolVar(&cfg.handoff, "handoff", true, "soak --fleet: the relays keep each source's handoff with its lease (fleet.handoff, the relay's default), so that the next owner takes an OPC UA source's data subscription over and resumes a gateway source's session; --handoff=false writes handoff: false")
	fs.Int64Var(&cfg.seed, "seed", 0, "soak: the seed of the fault order (0: from the clock; a failure prints the one to replay)")
	fs.DurationVar(&cfg.outage, "outage", 120*time.Second, "wan-outage, wan-outage-ldm: how long the WAN is down (1s-24h)")
	fs.StringVar(&cfg.wan, "wan", wanCut, "wan-outage, wan-outage-ldm: how the WAN goes down: cut (connections reset, new ones refused), freeze (nothing passes, sockets stay open) or none (it stays up: the control run, the same phases without an outage)")
	fs.DurationVar(&cfg.flap, "flap", time.Minute, "wan-flap: how long the WAN flaps, cut 5 s and up 5 s (10s-24h)")
	fs.DurationVar(&cfg.wanRTT, "wan-rtt", 0, "edge scenarios: round-trip time the WAN adds, the whole run (0-10s)")
	fs.StringVar(&cfg.hub, "hub", hubProcess, "edge scenarios: where the hub cluster runs: process (a process of its own, as the hub is other machines) or inline (in the bench's process, sharing its heap and garbage collector with the site)")
	fs.StringVar(&cfg.site, "site", siteProcess, "edge scenarios: where the site's servers run: process (a process of their own, as the relay and the servers are on a site; needs --hub process) or inline (in the bench's process, beside the relay, the source and the audit)")
	fs.IntVar(&cfg.hubNice, "hub-nice", 19, "edge scenarios with --hub process: the hub process's nice value (0-19; Linux): the hub stands for other machines, so by default it gets only the CPU the site leaves")
	fs.StringVar(&cfg.leafCompression, "leaf-compression", edgeLeafCompression, "edge scenarios: how the site's servers compress what they send the hub on their leaf connections: "+strings.Join(natstest.LeafCompressionModes(), ", ")+" (s2_auto, nats-server's default, moves to s2_best once the round trip passes 100 ms, as a catch-up makes it)")
	fs.DurationVar(&cfg.dupWindow, "dup-window", 0, "edge scenarios: the site stream's duplicateWindow (0: the relay's default, 2m; 1s-24h), what its servers hold a message ID for: about 100 bytes an update each")
	fs.Uint64Var(&cfg.catchupRate, "catchup-rate", 0, "edge scenarios: rate_limit_bps of the site's source consumer, the hub's catch-up cap in bits/s (0: none; 1000000-10000000000)")
	fs.StringVar(&cfg.source, "source", sourceOPCUA, "config-change: the tags' source: opcua (the embedded Warm pair) or mx (a pair of simulated gateways; the 100 changed tags change subject, a gateway item having no monitoring settings)")
	fs.StringVar(&cfg.via, "via", viaAPI, "config-change: how the change reaches the relay: api (Relay.Apply in this process) or sighup (the apbridge binary, its file rewritten and SIGHUP sent)")
	verbose := fs.Bool("v", false, "log what the components do (to stderr)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole bench process (servers, relay and clients alike) to this file; given a directory, write there the CPU profiles of the measured processes of ua-ingest (ua-ingest-relay.pprof, ua-ingest-plain.pprof) and relay-throughput (relay-throughput-relay.pprof, relay-throughput-plain.pprof, their last flat-out runs) and bench.pprof")
	list := fs.Bool("list", false, "list the scenarios and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: apbridge-lab bench [--json] [--runs N] [--rtt DURATION] [--tls] [SCENARIO...]")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
		fmt.Fprintln(stderr, "\nscenarios (all when none is named):")
		for _, s := range scenarios() {
			fmt.Fprintf(stderr, "  %-22s %s\n", s.name, s.desc)
		}
	}
	// Flags may follow the scenarios' names too (bench relay-restart
	// --runs 10): the flag package stops at the first name.
	var names []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		names, rest = append(names, fs.Arg(0)), fs.Args()[1:]
	}
	fs.Visit(func(f *flag.Flag) { cfg.durationSet = cfg.durationSet || f.Name == "duration" })
	if cfg.hz < 1 || cfg.hz > 50 {
		return fmt.Errorf("--hz: %d is out of range (valid 1-50)", cfg.hz)
	}
	if cfg.server != serverEmbedded && cfg.server != serverNode {
		return fmt.Errorf("--server: %q is not valid (valid: %s, %s)", cfg.server, serverEmbedded, serverNode)
	}
	fs.Visit(func(f *flag.Flag) {
		cfg.runsSet = cfg.runsSet || f.Name == "runs"
		cfg.sinkSet = cfg.sinkSet || f.Name == "sink"
	})
	cfg.mode = uaclient.Mode(*mode)
	if cfg.mode != uaclient.ModeWarm && cfg.mode != uaclient.ModeHot && cfg.mode != uaclient.ModePrepared {
		return fmt.Errorf("--mode: %q is not valid (valid: warm, hot, prepared)", *mode)
	}
	if cfg.gatewayCaps != "full" && cfg.gatewayCaps != "base" {
		return fmt.Errorf("--gateway-caps: %q is not valid (valid: full, base)", cfg.gatewayCaps)
	}
	if cfg.tags < 0 || cfg.tags > 20000 {
		return fmt.Errorf("--tags: %d is out of range (valid 1-20000)", cfg.tags)
	}
	if cfg.runs < 1 || cfg.runs > 1000 {
		return fmt.Errorf("--runs: %d is out of range (valid 1-1000)", cfg.runs)
	}
	if cfg.rtt < 0 || cfg.rtt > 10*time.Second {
		return fmt.Errorf("--rtt: %v is out of range (valid 0-10s)", cfg.rtt)
	}
	if cfg.blip < 0 || cfg.blip > 10*time.Minute {
		return fmt.Errorf("--blip: %v is out of range (valid 0-10m)", cfg.blip)
	}
	if cfg.standbyLevel < 0 || cfg.standbyLevel > 250 {
		// Above the primary's 250 the standby would be the better server,
		// and a blip on the worse one is not what the scenarios are about.
		return fmt.Errorf("--standby-level: %d is out of range (valid 0-250)", cfg.standbyLevel)
	}
	if cfg.delay < 0 || cfg.delay > time.Minute {
		return fmt.Errorf("--delay: %v is out of range (valid 0-1m)", cfg.delay)
	}
	if cfg.grace < 100*time.Millisecond || cfg.grace > 5*time.Minute {
		return fmt.Errorf("--grace: %v is out of range (valid 100ms-5m)", cfg.grace)
	}
	if cfg.rate < 100*time.Microsecond || cfg.rate > time.Second {
		return fmt.Errorf("--period: %v is out of range (valid 100µs-1s)", cfg.rate)
	}
	if cfg.childMemLimit != "" && !memLimitForm.MatchString(cfg.childMemLimit) {
		return fmt.Errorf("--relay-memlimit: %q is not a GOMEMLIMIT (valid: a byte count with an optional B, KiB, MiB, GiB or TiB suffix, or off)", cfg.childMemLimit)
	}
	if cfg.cycles < 1 || cfg.cycles > 100000 {
		return fmt.Errorf("--cycles: %d is out of range (valid 1-100000)", cfg.cycles)
	}
	if cfg.sink != soakSinkCore && cfg.sink != soakSinkJetStream {
		return fmt.Errorf("--sink: %q is not valid (valid: %s, %s)", cfg.sink, soakSinkCore, soakSinkJetStream)
	}
	fs.Visit(func(f *flag.Flag) { cfg.handoffSet = cfg.handoffSet || f.Name == "handoff" })
	if cfg.handoffSet && !cfg.fleet {
		return fmt.Errorf("--handoff needs --fleet: it sets fleet.handoff in the soak's fleet")
	}
	if cfg.fleet && cfg.sink != soakSinkJetStream {
		// The fleet's guarantees (one copy of an update across a takeover
		// or a handover overlap) rest on the stream's message IDs; the
		// check by identity reads the stream.
		return fmt.Errorf("--fleet needs --sink %s: a fleet's relays hand sources over with an overlap that only the JetStream sink stores once, and the soak checks a fleet by auditing the stream", soakSinkJetStream)
	}
	if cfg.outage < time.Second || cfg.outage > 24*time.Hour {
		return fmt.Errorf("--outage: %v is out of range (valid 1s-24h)", cfg.outage)
	}
	if cfg.wan != wanCut && cfg.wan != wanFreeze && cfg.wan != wanNone {
		return fmt.Errorf("--wan: %q is not valid (valid: %s, %s, %s)", cfg.wan, wanCut, wanFreeze, wanNone)
	}
	if cfg.flap < 10*time.Second || cfg.flap > 24*time.Hour {
		return fmt.Errorf("--flap: %v is out of range (valid 10s-24h)", cfg.flap)
	}
	if cfg.wanRTT < 0 || cfg.wanRTT > 10*time.Second {
		return fmt.Errorf("--wan-rtt: %v is out of range (valid 0-10s)", cfg.wanRTT)
	}
	if cfg.hub != hubProcess && cfg.hub != hubInline {
		return fmt.Errorf("--hub: %q is not valid (valid: %s, %s)", cfg.hub, hubProcess, hubInline)
	}
	if cfg.site != siteProcess && cfg.site != siteInline {
		return fmt.Errorf("--site: %q is not valid (valid: %s, %s)", cfg.site, siteProcess, siteInline)
	}
	if cfg.site == siteProcess && cfg.hub != hubProcess {
		return fmt.Errorf("--site %s (the default) needs --hub %s; with --hub %s give --site %s", siteProcess, hubProcess, hubInline, siteInline)
	}
	if cfg.hubNice < 0 || cfg.hubNice > 19 {
		return fmt.Errorf("--hub-nice: %d is out of range (valid 0-19)", cfg.hubNice)
	}
	if !slices.Contains(natstest.LeafCompressionModes(), cfg.leafCompression) {
		return fmt.Errorf("--leaf-compression: %q is not valid (valid: %s)", cfg.leafCompression, strings.Join(natstest.LeafCompressionModes(), ", "))
	}
	if cfg.dupWindow != 0 && (cfg.dupWindow < time.Second || cfg.dupWindow > 24*time.Hour) {
		return fmt.Errorf("--dup-window: %v is out of range (valid 0, or 1s-24h)", cfg.dupWindow)
	}
	if cfg.catchupRate != 0 && (cfg.catchupRate < 1_000_000 || cfg.catchupRate > 10_000_000_000) {
		return fmt.Errorf("--catchup-rate: %d is out of range (valid 0, or 1000000-10000000000 bits/s)", cfg.catchupRate)
	}
	if cfg.seed < 0 {
		return fmt.Errorf("--seed: %d is out of range (valid 0 or more)", cfg.seed)
	}
	if *list {
		for _, s := range scenarios() {
			fmt.Fprintf(stdout, "%-22s %s\n", s.name, s.desc)
		}
		return nil
	}
	if st, err := os.Stat(*cpuProfile); *cpuProfile != "" && err == nil && st.IsDir() {
		cfg.childCPUProfiles = *cpuProfile
		*cpuProfile = filepath.Join(*cpuProfile, "bench.pprof")
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	cfg.log = zerolog.Nop()
	cfg.verbose = *verbose
	if *verbose {
		cfg.log = cli.NewLogger(stderr, true, zerolog.DebugLevel)
	}
	cfg.progress = stderr

	var selected []scenario
	byName := map[string]scenario{}
	for _, s := range scenarios() {
		byName[s.name] = s
	}
	if len(names) == 0 {
		selected = scenarios()
	}
	for _, name := range names {
		s, ok := byName[name]
		if !ok {
			var names []string
			for _, s := range scenarios() {
				names = append(names, s.name)
			}
			return fmt.Errorf("unknown scenario %q (valid: %s)", name, strings.Join(names, ", "))
		}
		selected = append(selected, s)
	}

	var results []*result
	for _, s := range selected {
		scfg := cfg
		if n := defaultRuns(s.name); n > 0 && !cfg.runsSet {
			scfg.runs = n
		}
		fmt.Fprintf(stderr, "bench: %s (%d runs) ...\n", s.name, scfg.runs)
		r, err := s.run(ctx, scfg)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		r.Scenario = s.name
		r.finish()
		results = append(results, r)
		if *asJSON {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, string(b))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if !*asJSON {
		printTable(stdout, results)
	}
	return nil
}

// defaultRuns is a scenario's runs without --runs; 0: the flag's
// default.
func defaultRuns(name string) int {
	if name == "relay-restart" {
		return rrDefaultRuns
	}
	return 0
}

func printTable(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\truns\tswitch p50 ms\tp99 ms\tmax ms\tmax gap ms\tlost\tduplicated\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%d\t\n",
			r.Scenario, r.Runs, r.SwitchP50, r.SwitchP99, r.SwitchMax, r.MaxGap, r.Lost, r.Duplicated)
	}
	tw.Flush()
	for _, r := range results {
		if len(r.extra) == 0 {
			continue
		}
		var parts []string
		for _, e := range r.extra {
			parts = append(parts, fmt.Sprintf("%s=%v", e.key, e.val))
		}
		fmt.Fprintf(w, "%s: %s\n", r.Scenario, strings.Join(parts, " "))
	}
}
