package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// fleetRelay starts a fleet relay with the shared sources, each built
// again (a new view) at every lease won.
func fleetRelay(t *testing.T, cl *natstest.Cluster, id string, srcs []*simsource.Shared) *relay.Relay {
	t.Helper()
	return fleetRelayOn(t, cl.URLs(), id, srcs)
}

// fleetRelayOn is fleetRelay on the given servers.
func fleetRelayOn(t *testing.T, servers []string, id string, srcs []*simsource.Shared, nopts ...nats.Option) *relay.Relay {
	t.Helper()
	off := ""
	cfg := &relay.Config{
		NATS: relay.NATSConfig{Servers: servers}, HTTP: relay.HTTPConfig{Listen: &off},
		Instance: id, Service: relay.ServiceConfig{Prefix: "fleet." + id},
		Fleet: &relay.FleetConfig{RelayID: id, LeaseTTL: time.Second, Dwell: 100 * time.Millisecond, Overlap: 100 * time.Millisecond, Bucket: "relays"},
	}
	opts := []relay.Option{relay.WithNATSOptions(nopts...)}
	tags := []bridge.TagConfig{{Name: "t1", Address: "a1"}, {Name: "t2", Address: "a2"}}
	for _, s := range srcs {
		opts = append(opts, relay.WithSourceFactory(s.Name(), tags, func() (bridge.Source, error) { return s.Relay(), nil }))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := relay.Start(ctx, cfg, append(opts, relay.WithLogger(testutil.Logger(t)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// seen records who published each source's updates.
type seen struct {
	mu      sync.Mutex
	by      map[string]map[string]int // source -> relay -> count
	bad     []string
	markers int
}

// settleSubject is outside every source's subjects: markers on it arrive
// on the recording subscription in order with the updates.
const settleSubject = "apbridge._settle"

// settle makes sure that every update published before it was called has
// been recorded, then resets. A closed relay drained its connection, so
// its server had processed every update it sent; a marker published
// through each node after that reaches the subscriber behind those updates
// (one route per node pair, in order).
func (s *seen) settle(t *testing.T, cl *natstest.Cluster) {
	t.Helper()
	s.mu.Lock()
	want := s.markers + len(cl.Nodes())
	s.mu.Unlock()
	for _, n := range cl.Nodes() {
		nc, err := nats.Connect(n.URL(), nats.DontRandomize(), nats.IgnoreDiscoveredServers())
		if err != nil {
			t.Fatal(err)
		}
		nc.Publish(settleSubject, nil)
		nc.Flush()
		nc.Close()
	}
	testutil.WaitFor(t, "the settle markers", 10*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.markers >= want
	})
	s.reset()
}

func (s *seen) reset() {
	s.mu.Lock()
	s.by = map[string]map[string]int{}
	s.mu.Unlock()
}

func (s *seen) add(m *nats.Msg) {
	src := strings.Split(m.Subject, ".")[1]
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Subject == settleSubject {
		s.markers++
		return
	}
	if m.Header.Get(wire.HeaderLease) == "" {
		s.bad = append(s.bad, m.Subject+": no "+wire.HeaderLease)
	}
	if s.by[src] == nil {
		s.by[src] = map[string]int{}
	}
	s.by[src][m.Header.Get(wire.HeaderRelay)]++
}

// publishers returns the relays seen per source.
func (s *seen) publishers() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for src, rs := range s.by {
		for r := range rs {
			out[src] = append(out[src], r)
		}
	}
	return out
}

// A fleet of two relays runs each source on one of them only, with the
// lease token in every update; when one shuts down the other runs them
// all.
func TestFleetRelaysDivideSources(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithJetStream())
	var srcs []*simsource.Shared
	for i := range 4 {
		s := simsource.NewShared(fmt.Sprintf("line%d", i))
		srcs = append(srcs, s)
	}
	nc, err := nats.Connect(cl.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rec := &seen{}
	rec.reset()
	sub, err := nc.Subscribe("apbridge.>", rec.add)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()

	a := fleetRelay(t, cl, "ra", srcs)
	b := fleetRelay(t, cl, "rb", srcs)
	for _, s := range srcs {
		s.Sim().Run(10 * time.Millisecond)
		defer s.Close()
	}
	testutil.WaitFor(t, "both relays to own sources", 10*time.Second, func() bool {
		return len(a.Fleet().Owned()) > 0 && len(b.Fleet().Owned()) > 0 && len(a.Fleet().Owned())+len(b.Fleet().Owned()) == 4
	})
	// A pair handed from ra to rb stays valid on ra for the overlap:
	// wait until every source has one publisher, then until what ra sent
	// before has arrived.
	testutil.WaitFor(t, "one valid owner per source", 10*time.Second, func() bool {
		for _, s := range srcs {
			_, va := a.Fleet().Valid(s.Name())
			_, vb := b.Fleet().Valid(s.Name())
			if va == vb {
				return false
			}
		}
		return true
	})
	for _, r := range []*relay.Relay{a, b} {
		if err := r.Conn().Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	owner := map[string]string{}
	for _, p := range a.Fleet().Owned() {
		owner[p] = "ra"
	}
	for _, p := range b.Fleet().Owned() {
		owner[p] = "rb"
	}
	rec.settle(t, cl)
	testutil.WaitFor(t, "updates of every source", 10*time.Second, func() bool { return len(rec.publishers()) == 4 })
	for src, rs := range rec.publishers() {
		if len(rs) != 1 || rs[0] != owner[src] {
			t.Errorf("%s published by %v, want only its owner %s", src, rs, owner[src])
		}
	}
	if ok, why := a.Ready(); !ok {
		t.Errorf("relay ra not ready with sources it does not own: %v", why)
	}

	if err := a.Close(); err != nil {
		t.Logf("close ra: %v", err)
	}
	testutil.WaitFor(t, "rb to own every source", 5*time.Second, func() bool { return len(b.Fleet().Owned()) == 4 })
	rec.settle(t, cl)
	testutil.WaitFor(t, "updates of every source from rb", 10*time.Second, func() bool {
		p := rec.publishers()
		return len(p) == 4
	})
	for src, rs := range rec.publishers() {
		if len(rs) != 1 || rs[0] != "rb" {
			t.Errorf("%s published by %v after ra left, want rb only", src, rs)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.bad) > 0 {
		t.Errorf("updates without a fencing token: %v", rec.bad[:min(3, len(rec.bad))])
	}
}

func TestFleetConfigErrors(t *testing.T) {
	_, err := relay.Parse([]byte(`
nats: {servers: [nats://localhost:4222]}
fleet: {relayId: "a.b", leaseTTL: 1500ms, replicas: 9}
sources:
  - name: "line.1"
    endpoints: [opc.tcp://localhost:4840]
    tags: [{name: t, address: "ns=2;s=T"}]
`))
	for _, want := range []string{"fleet.relayId", "fleet.leaseTTL: 1.5s", "fleet.replicas: 9", "sources[0].name: \"line.1\" cannot name a lease"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
}

// fleet.handoff is on unless a file turns it off: a relay kill then loses
// nothing of an OPC UA source that the server held. A library caller's
// FleetConfig without it has it on too.
func TestFleetHandoffDefault(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{{"", true}, {", handoff: true", true}, {", handoff: false", false}} {
		cfg, err := relay.Parse(fmt.Appendf(nil, `
nats: {servers: [nats://localhost:4222]}
fleet: {relayId: r1%s}
sources:
  - name: line1
    endpoints: [opc.tcp://localhost:4840]
    tags: [{name: t, address: "ns=2;s=T"}]
`, c.line))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Fleet.HandoffEnabled(); got != c.want {
			t.Errorf("fleet {relayId: r1%s}: handoff %v, want %v", c.line, got, c.want)
		}
	}
	if !(&relay.FleetConfig{RelayID: "r1"}).HandoffEnabled() {
		t.Error("a FleetConfig without Handoff: handoff off, want on")
	}
}

// A relay cut off from the cluster fences itself: it stops handing its
// sources' updates to NATS before the other relay can win them, and the
// other relay takes them over.
func TestFleetPartitionedRelayStopsPublishing(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithJetStream(), natstest.WithProxies())
	var srcs []*simsource.Shared
	for i := range 4 {
		srcs = append(srcs, simsource.NewShared(fmt.Sprintf("line%d", i)))
	}
	// ra reaches the cluster only through node 0's proxy.
	a := fleetRelayOn(t, []string{cl.Node(0).URL()}, "ra", srcs, nats.IgnoreDiscoveredServers())
	b := fleetRelayOn(t, []string{cl.Node(1).DirectURL(), cl.Node(2).DirectURL()}, "rb", srcs)
	for _, s := range srcs {
		s.Sim().Run(5 * time.Millisecond)
		defer s.Close()
	}
	testutil.WaitFor(t, "both relays to own sources", 10*time.Second, func() bool {
		return len(a.Fleet().Owned()) > 0 && len(b.Fleet().Owned()) > 0 && len(a.Fleet().Owned())+len(b.Fleet().Owned()) == 4
	})
	published := func(r *relay.Relay, src string) uint64 {
		for _, s := range r.Bridge().Stats() {
			if s.Name == src {
				return s.Published
			}
		}
		return 0
	}
	had := a.Fleet().Owned()
	testutil.WaitFor(t, "ra to publish its sources (the positive control)", 5*time.Second, func() bool {
		for _, p := range had {
			if published(a, p) == 0 {
				return false
			}
		}
		return true
	})
	cl.Node(0).Proxy().Freeze()
	defer cl.Node(0).Proxy().Heal()
	// Sample ra's count the moment rb may publish a source: it must not
	// grow after that.
	atGain := map[string]uint64{}
	deadline := time.Now().Add(10 * time.Second)
	for len(atGain) < len(had) {
		if time.Now().After(deadline) {
			t.Fatalf("rb took only %d of ra's %d sources", len(atGain), len(had))
		}
		for _, p := range had {
			if _, seen := atGain[p]; seen {
				continue
			}
			if _, ok := b.Fleet().Valid(p); ok {
				atGain[p] = published(a, p)
			}
		}
		time.Sleep(time.Millisecond) // sampling rb's leases
	}
	// ra gives the sources up a TTL after its last renewal; wait past it.
	testutil.WaitFor(t, "ra to give its sources up", 5*time.Second, func() bool { return len(a.Fleet().Owned()) == 0 })
	for _, p := range had {
		if n := published(a, p); n != atGain[p] {
			t.Errorf("%s: ra handed %d updates to NATS after rb won the lease", p, n-atGain[p])
		}
	}
	// Cut off with its sources ticking, ra dropped their updates from the
	// fence until it gave them up, and says how many.
	if a.FleetFenced() == 0 {
		t.Error("ra reports no fenced update")
	}
}

// A relay's bucket connection leaves a broker that announces lame-duck
// mode at once, so that lease renewals never wait for the eviction: the
// relay keeps every source it owns.
func TestFleetBucketConnectionLeavesLameDuckBroker(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithJetStream())
	var srcs []*simsource.Shared
	for i := range 2 {
		srcs = append(srcs, simsource.NewShared(fmt.Sprintf("line%d", i)))
	}
	a := fleetRelay(t, cl, "ra", srcs)
	for _, s := range srcs {
		s.Sim().Run(10 * time.Millisecond)
		defer s.Close()
	}
	testutil.WaitFor(t, "ra to own every source", 10*time.Second, func() bool { return len(a.Fleet().Owned()) == len(srcs) })
	const name = "apbridge-ra-fleet"
	on := func() (*natstest.Node, uint64) {
		for _, n := range cl.Nodes() {
			if ids := n.ClientIDs(name); len(ids) == 1 {
				return n, ids[0]
			}
		}
		return nil, 0
	}
	node, cid := on()
	if node == nil {
		t.Fatalf("no client named %s on any node", name)
	}
	before := a.Fleet().Stats()
	if err := node.LDMClientByID(cid); err != nil {
		t.Fatal(err)
	}
	// The node does not evict anyone (only the client was told): the
	// connection moves only if the relay moves it.
	testutil.WaitFor(t, "the bucket connection to leave the lame-duck broker", 5*time.Second, func() bool {
		n, _ := on()
		return n != nil && n != node
	})
	// Two lease TTLs on the new broker: a relay whose renewals stalled
	// would have fenced itself and lost its leases by then.
	watchUntil := time.Now().Add(2 * time.Second)
	for time.Now().Before(watchUntil) {
		if st := a.Fleet().Stats(); st.Lost != before.Lost || st.Owned != len(srcs) {
			t.Fatalf("ra lost leases across the broker's lame-duck notice: %+v, before %+v", st, before)
		}
		time.Sleep(50 * time.Millisecond) // watching a window for a change that must not come
	}
}
