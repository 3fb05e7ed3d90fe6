package main

import (
	"bufio"
	"context"
	"encoding/json"
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
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/wire"
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

// startLabChild starts cmd as one of the lab's child processes (labChildEnv
// set, at the given nice value) with a pipe to its stdin and one from its
// stdout: the lab talks to its children in lines.
func startLabChild(cmd *exec.Cmd, nice int) (io.WriteCloser, *bufio.Scanner, error) {
	cmd.Env = append(os.Environ(), labChildEnv+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := startAtPriority(cmd, nice); err != nil {
		return nil, nil, err
	}
	return in, bufio.NewScanner(out), nil
}

const (
	soakStream     = "SOAK"
	soakOPCUATags  = 40 // tags of the OPC UA pair (without --tags)
	soakGalaxyTags = 20 // counters of the gateway pair
	soakPeriod     = 100 * time.Millisecond
	// soakWholeWithin bounds how long the relay may take to be whole
	// again after a fault: both NATS connections, both sources on a
	// healthy server with a live standby, every counter flowing.
	soakWholeWithin = 60 * time.Second
	// soakFleetOPCUATags are the tags of each OPC UA pair with --fleet:
	// two pairs and three relay processes share the two cores.
	soakFleetOPCUATags = 20
)

func soakScenarios() []scenario {
	return []scenario{
		{"soak", "seeded random broker LDM/kill, OPC UA graceful stop/kill/frozen link, gateway restart/kill (with --fleet: three relays and a relay kill), repeated --cycles times under traffic; every update checked", benchSoak},
	}
}

// soakRig is what the soak runs on: the embedded cluster, OPC UA pairs,
// gateway pairs, the relays in processes of their own (one, or three of a
// fleet), and an independent subscriber that checks every update.
type soakRig struct {
	cfg      benchConfig
	rng      *rand.Rand
	cl       *natstest.Cluster
	uas      []*soakUA
	gwps     []*soakGW
	stopData func()
	relays   []*soakRelay
	consumer *apconn.Conn
	check    *soakCheck
	where    atomic.Value // soakWhere: the fault under way
	counters []string     // subjects of the counter tags
	dir      string
	// keepLogs keeps dir at the end of a run that succeeded but lost
	// updates, for the relays' side of the story.
	keepLogs bool
	// owners and kills are the fleet's: who published each source, and
	// the relay kills (soak_fleet.go).
	owners *soakOwners

	// windows are when each fault began, for the stream audit.
	mu      sync.Mutex
	windows []soakWindow
	kills   []soakKill
	// With the JetStream sink: every message ID the subscriber saw, by
	// subject, and the updates that repeated one (subject -> sequence
	// number -> ID). An update identical to one already sent (a refresh
	// repeating a tag's value after a switch) has the same ID, so the
	// stream stores it once.
	msgIDs  map[string]map[string]bool
	repeats map[string]map[uint64]string
}

// soakUA is an OPC UA pair and the name of the source that reads it.
type soakUA struct {
	name string
	pair *uaserver.Pair
}

// soakGW is a gateway pair and the name of the source that reads it.
type soakGW struct {
	name string
	gws  [2]*mxsim.Gateway
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
	mode := ""
	if cfg.fleet {
		mode = ", a fleet of 3 relays"
	}
	fmt.Fprintf(cfg.progress, "  soak: %d cycles, sink %s%s, seed %d (replay with --seed %d)\n", cfg.cycles, cfg.sink, mode, seed, seed)
	r := &soakRig{cfg: cfg, rng: rand.New(rand.NewPCG(uint64(seed), 0x50a4)), check: newSoakCheck()}
	if cfg.fleet {
		r.check, r.owners = newSoakGapCheck(), newSoakOwners()
	}
	r.where.Store(soakWhere{kind: soakSteady})
	defer r.close()
	defer func() {
		if r.dir != "" && (err != nil || r.keepLogs) {
			// Keep the relays' logs and configs for the replay.
			fmt.Fprintf(cfg.progress, "  the relays' logs and configs are kept in %s\n", r.dir)
			r.dir = ""
		}
	}()
	if err = r.start(ctx); err != nil {
		return nil, err
	}
	if err := r.waitWhole(ctx, "start"); err != nil {
		return nil, err
	}
	// Let the relays' memory reach its working size before it is measured.
	if err := ctxtime.Sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	for _, rel := range r.relays {
		if rel.start, err = rel.child.stats(); err != nil {
			return nil, err
		}
	}
	faults := soakFaults(cfg.fleet)
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
			if err == nil {
				err = r.measureRestarted()
			}
			if err != nil {
				return nil, fmt.Errorf("cycle %d, %s (replay: --seed %d --cycles %d): %w", cycle, f.name, seed, cycle, err)
			}
			counts[f.name]++
			gaps[f.name] = append(gaps[f.name], ms(r.check.takeGap()))
			r.setWhere(soakWhere{soakSteady, cycle})
		}
	}
	for _, rel := range r.relays {
		if rel.end, err = rel.child.settledStats(ctx, rel.start.Goroutines); err != nil {
			return nil, err
		}
	}
	return r.report(ctx, seed, counts, gaps)
}

// start brings everything up and starts the relay processes.
func (r *soakRig) start(ctx context.Context) (err error) {
	cfg := r.cfg
	var copts []natstest.Option
	if cfg.sink == soakSinkJetStream {
		copts = append(copts, natstest.WithJetStream())
	}
	if r.cl, err = startBenchCluster(ctx, cfg, copts...); err != nil {
		return err
	}
	tags := soakOPCUATags
	uaNames, gwNames := []string{"line1"}, []string{galaxySource}
	if cfg.fleet {
		// Four sources, so that each of the three relays owns one at least.
		tags = soakFleetOPCUATags
		uaNames, gwNames = []string{"line1", "line2"}, []string{galaxySource, "galaxy2"}
	}
	if cfg.tags > 0 {
		tags = cfg.tags
	}
	for _, name := range uaNames {
		pair, err := uaserver.StartPair(ctx, uaserver.WithTags(tags), uaserver.WithTagInterval(soakPeriod),
			uaserver.WithServiceLevels(uaserver.LevelPrimary, uaserver.LevelHealthyFollower))
		if err != nil {
			return err
		}
		r.uas = append(r.uas, &soakUA{name: name, pair: pair})
	}
	// The gateway pairs serve one Galaxy: its counters tick once for all.
	data := mxsim.NewData()
	r.stopData = data.RunCounters("Galaxy_", soakGalaxyTags, soakPeriod)
	for _, name := range gwNames {
		gw := &soakGW{name: name}
		r.gwps = append(r.gwps, gw)
		for i := range gw.gws {
			if gw.gws[i], err = mxsim.Start(data); err != nil {
				return err
			}
		}
	}
	if r.dir, err = os.MkdirTemp("", "apbridge-soak-"); err != nil {
		return err
	}
	ids := []string{""}
	if cfg.fleet {
		if ids, err = soakFleetIDs(r.sourceNames()); err != nil {
			return err
		}
	}
	sources := r.sourcesConfig()
	for _, id := range ids {
		rel := &soakRelay{id: id, config: filepath.Join(r.dir, "relay"+id+".yaml"), logPath: filepath.Join(r.dir, "relay"+id+".log")}
		if err := os.WriteFile(rel.config, []byte(r.relayConfig(id)+sources), 0o600); err != nil {
			return err
		}
		r.relays = append(r.relays, rel)
	}

	// The subscriber listens before the relays start, not to miss their
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
	for _, rel := range r.relays {
		if rel.child, err = startSoakChild(ctx, rel.config, rel.logPath, cfg.verbose); err != nil {
			return fmt.Errorf("relay %s: %w", rel.id, err)
		}
	}
	return nil
}

// sourceNames are the names of the soak's sources, OPC UA first.
func (r *soakRig) sourceNames() []string {
	var out []string
	for _, ua := range r.uas {
		out = append(out, ua.name)
	}
	for _, gw := range r.gwps {
		out = append(out, gw.name)
	}
	return out
}

// relayConfig is the head of relay id's config file (id "" without the
// fleet), as a site writes it; sourcesConfig is the rest, the same for
// every relay.
func (r *soakRig) relayConfig(id string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "instance: soak\nsubject: \"soak.{source}.{tag}\"\nhttp:\n  listen: \"\"\n")
	fmt.Fprintf(&b, "nats:\n  name: soak-relay%s\n  lameDuckHandling: SWITCH_TO_PASSIVE\n  servers:\n", id)
	for _, u := range r.cl.URLs() {
		fmt.Fprintf(&b, "    - %s\n", soakQuote(u))
	}
	if r.cfg.sink == soakSinkJetStream {
		fmt.Fprintf(&b, "sink: jetstream\njetstream:\n  stream: %s\n  subjects: [\"soak.>\"]\n  replicas: 3\n", soakStream)
	}
	if id != "" {
		// Each relay answers on a prefix of its own, outside soak.>.
		fmt.Fprintf(&b, "service:\n  prefix: %s\n", soakQuote("apbsoak."+id))
		fmt.Fprintf(&b, "fleet:\n  relayId: %s\n  bucket: %s\n  leaseTTL: %s\n  handoff: %v\n", soakQuote(id), soakFleetBucket, soakLeaseTTL, r.cfg.handoff)
	}
	return b.String()
}

func soakQuote(s string) string { j, _ := json.Marshal(s); return string(j) }

func (r *soakRig) sourcesConfig() string {
	var b strings.Builder
	q := soakQuote
	b.WriteString("sources:\n")
	for _, ua := range r.uas {
		fmt.Fprintf(&b, "  - name: %s\n    type: opcua\n    publishingIntervalMilliseconds: 100\n    samplingIntervalMilliseconds: 100\n    endpoints:\n", ua.name)
		for _, e := range ua.pair.Endpoints() {
			fmt.Fprintf(&b, "      - %s\n", q(e))
		}
		b.WriteString("    tags:\n")
		for _, tg := range ua.pair.Tags() {
			fmt.Fprintf(&b, "      - {name: %s, address: %s}\n", q(tg.Name), q(tg.NodeID().String()))
			if isCounter(tg.Name) {
				r.counters = append(r.counters, "soak."+ua.name+"."+tg.Name)
			}
		}
	}
	for _, gw := range r.gwps {
		fmt.Fprintf(&b, "  - name: %s\n    type: mxgateway\n    endpoints: [%s, %s]\n    tags:\n", gw.name, q(gw.gws[0].Addr()), q(gw.gws[1].Addr()))
		for i := range soakGalaxyTags {
			name := fmt.Sprintf("Galaxy_%d", i)
			fmt.Fprintf(&b, "      - {name: %s, address: %s}\n", q(name), q(name+".Value"))
			r.counters = append(r.counters, "soak."+gw.name+"."+name)
		}
	}
	return b.String()
}

// update is the independent subscriber's handler.
func (r *soakRig) update(m *nats.Msg) {
	u, err := wire.DecodeJSON(m.Data)
	if err != nil {
		return
	}
	now := time.Now()
	r.check.record(r.where.Load().(soakWhere), m.Subject, isCounter(u.Tag), u.Seq, u.Value, now)
	if r.owners != nil {
		r.owners.record(m, &u, now)
		return
	}
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

// stopRelays stops every relay process at once (so that none takes over
// what another hands over as it leaves).
func (r *soakRig) stopRelays() {
	var wg sync.WaitGroup
	for _, rel := range r.relays {
		if rel.child != nil {
			wg.Go(rel.child.stop)
		}
	}
	wg.Wait()
}

func (r *soakRig) close() {
	r.stopRelays()
	if r.consumer != nil {
		r.consumer.Close()
	}
	for _, gw := range r.gwps {
		for _, g := range gw.gws {
			if g != nil {
				g.Close()
			}
		}
	}
	if r.stopData != nil {
		r.stopData()
	}
	for _, ua := range r.uas {
		ua.pair.Close()
	}
	if r.cl != nil {
		r.cl.Close()
	}
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}
