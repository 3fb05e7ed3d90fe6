package relay_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// TestFleetSuccessorTakesSubscriptionOver: two fleet relays with
// fleet.handoff and a JetStream sink; the owner of an OPC UA source is cut
// off from NATS (its link frozen) while the server goes on counting. It
// stores nothing more, so acknowledges nothing more, and gives the source
// up a TTL after its last renewal; the other relay wins the lease, reads
// the owner's handoff, takes the data subscription over and asks for what
// the server held: the stream has every counter value, and the takeover
// is counted. The control without the handoff: the new owner subscribes
// anew, the values the cut-off owner received but could not store are
// lost, and no takeover is counted.
func TestFleetSuccessorTakesSubscriptionOver(t *testing.T) {
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff=%v", handoff), func(t *testing.T) { testFleetSuccessor(t, handoff) })
	}
}

// fleetOPCUA is two fleet relays' world: an embedded cluster with
// JetStream, an OPC UA pair counting at 20 Hz, and relays of one OPC UA
// source, opc1, storing into the stream FH.
type fleetOPCUA struct {
	t        *testing.T
	ctx      context.Context
	cl       *natstest.Cluster
	pair     *uaserver.Pair
	counters map[string]bool
	tags     string
	// endpoints are the source's endpoints in the config: the pair's
	// primary alone unless a test sets both.
	endpoints string
	// defaultHandoff leaves fleet.handoff out of the config: the relays
	// run on its default, whatever start is given.
	defaultHandoff bool
}

func newFleetOPCUA(t *testing.T, ctx context.Context, opts ...natstest.Option) *fleetOPCUA {
	t.Helper()
	e := &fleetOPCUA{t: t, ctx: ctx, counters: map[string]bool{}}
	e.cl = testutil.StartCluster(t, append([]natstest.Option{natstest.WithJetStream()}, opts...)...)
	var err error
	if e.pair, err = uaserver.StartPair(ctx, uaserver.WithTags(4), uaserver.WithTagInterval(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pair.Close)
	var tags strings.Builder
	for _, tg := range e.pair.Tags() {
		fmt.Fprintf(&tags, "      - {name: %q, address: %q}\n", tg.Name, tg.NodeID().String())
		if tg.Kind == uaserver.TagCounter {
			e.counters[tg.Name] = true
		}
	}
	e.tags = tags.String()
	e.endpoints = e.pair.A().Endpoint()
	return e
}

// start starts fleet relay id on servers, with or without fleet.handoff,
// closed when the test ends.
func (e *fleetOPCUA) start(id string, servers []string, handoff bool, log zerolog.Logger, nopts ...nats.Option) *relay.Relay {
	e.t.Helper()
	handoffYAML := fmt.Sprintf(", handoff: %v", handoff)
	if e.defaultHandoff {
		handoffYAML = ""
	}
	cfg, err := relay.Parse(fmt.Appendf(nil, `
nats: {servers: [%s]}
http: {listen: ""}
instance: %s
service: {prefix: fh-%s}
sink: jetstream
jetstream: {stream: FH, replicas: 1}
fleet: {relayId: %s, leaseTTL: 1s, dwell: 10m, bucket: fh, replicas: 1%s}
sources:
  - name: opc1
    endpoints: [%s]
    queueSize: 64
    samplingIntervalMilliseconds: 20
    tags:
%s`, strings.Join(servers, ", "), id, id, id, handoffYAML, e.endpoints, e.tags))
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := relay.Start(e.ctx, cfg, relay.WithLogger(log), relay.WithNATSOptions(nopts...))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { r.Close() })
	return r
}

// waitStored waits until the stream holds every counter up to value.
func (e *fleetOPCUA) waitStored(what string, value int64) {
	e.t.Helper()
	testutil.WaitFor(e.t, what, 30*time.Second, func() bool {
		vals := streamCounters(e.ctx, e.t, e.cl, e.counters)
		for name := range e.counters {
			vs := vals[name]
			if len(vs) == 0 || vs[len(vs)-1] < value {
				return false
			}
		}
		return true
	})
}

// lost returns the counter values missing in the stream between each
// counter's first and last value stored.
func (e *fleetOPCUA) lost() int { return e.lostFrom(math.MinInt64) }

// lostFrom returns the counter values missing in the stream between each
// counter's first value stored from value from on and its last.
func (e *fleetOPCUA) lostFrom(from int64) int {
	e.t.Helper()
	lost := 0
	for name, all := range streamCounters(e.ctx, e.t, e.cl, e.counters) {
		vs := slices.DeleteFunc(all, func(v int64) bool { return v < from })
		if len(vs) == 0 {
			continue
		}
		seen := map[int64]bool{}
		lo, hi := vs[0], vs[0]
		for _, v := range vs {
			seen[v] = true
			lo, hi = min(lo, v), max(hi, v)
		}
		if miss := int(hi-lo+1) - len(seen); miss > 0 {
			e.t.Logf("%s: %d values missing between %d and %d", name, miss, lo, hi)
			lost += miss
		}
	}
	return lost
}

func testFleetSuccessor(t *testing.T, handoff bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newFleetOPCUA(t, ctx, natstest.WithProxies())
	cl, pair := e.cl, e.pair
	logger := func(id string) zerolog.Logger { return testutil.Logger(t).With().Str("relay", id).Logger() }
	// ra reaches the cluster only through node 0's proxy, and starts
	// first: it owns the source, and keeps it (dwell 10 min).
	a := e.start("ra", []string{cl.Node(0).URL()}, handoff, logger("ra"), nats.IgnoreDiscoveredServers())
	testutil.WaitFor(t, "ra to own and publish the source", 30*time.Second, func() bool {
		st := a.Bridge().Stats()
		return len(a.Fleet().Owned()) == 1 && len(st) == 1 && st[0].Published > 20
	})
	b := e.start("rb", []string{cl.Node(1).DirectURL(), cl.Node(2).DirectURL()}, handoff, logger("rb"))
	if handoff {
		testutil.WaitFor(t, "ra's handoff in the bucket", 10*time.Second, func() bool {
			return readHandoff(ctx, t, cl) != nil
		})
	}
	tick := pair.Tick()
	testutil.WaitFor(t, "10 more ticks", 10*time.Second, func() bool { return pair.Tick() >= tick+10 })

	cl.Node(0).Proxy().Freeze()
	defer cl.Node(0).Proxy().Heal()
	testutil.WaitFor(t, "rb to take the source", 20*time.Second, func() bool { return len(b.Fleet().Owned()) == 1 })
	tick = pair.Tick()
	e.waitStored("rb to store every counter up to the server's tick", int64(tick)+5)
	lost := e.lost()
	st := b.Bridge().Stats()[0]
	t.Logf("handoff %v: lost %d counter values in the stream, rb transfers %d, fallbacks %d, refreshes %d, ra fenced %d",
		handoff, lost, st.SuccessorTransfers, st.SuccessorFallbacks, st.Refreshes, a.FleetFenced())
	if !handoff {
		if lost == 0 || st.SuccessorTransfers != 0 {
			t.Fatalf("without the handoff: lost %d, transfers %d; want a loss and no transfer", lost, st.SuccessorTransfers)
		}
		return
	}
	if lost != 0 {
		t.Fatalf("the fleet's successor lost %d counter values", lost)
	}
	if st.SuccessorTransfers != 1 || st.SuccessorFallbacks != 0 {
		t.Fatalf("rb transfers %d, fallbacks %d; want 1, 0", st.SuccessorTransfers, st.SuccessorFallbacks)
	}
	if rec := readHandoff(ctx, t, cl); rec == nil || !strings.Contains(string(rec), `"relay":"rb"`) {
		t.Fatalf("the bucket's handoff after the takeover is %s; want rb's", rec)
	}
}

// readHandoff returns the handoff record of opc1, nil when there is none.
func readHandoff(ctx context.Context, t *testing.T, cl *natstest.Cluster) []byte {
	t.Helper()
	nc, err := nats.Connect(cl.Node(1).DirectURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, relay.HandoffBucket("fh"))
	if err != nil {
		return nil
	}
	e, err := kv.Get(ctx, "opc1")
	if err != nil {
		return nil
	}
	return e.Value()
}

// streamCounters reads the stream FH from its start: each counter's
// values, in the stream's order.
func streamCounters(ctx context.Context, t *testing.T, cl *natstest.Cluster, counters map[string]bool) map[string][]int64 {
	t.Helper()
	nc, err := nats.Connect(cl.Node(1).DirectURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, "FH")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int64{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		u, err := wire.DecodeJSON(m.Data)
		if err != nil || !counters[u.Tag] {
			continue
		}
		switch v := u.Value.(type) {
		case int32:
			out[u.Tag] = append(out[u.Tag], int64(v))
		case int64:
			out[u.Tag] = append(out[u.Tag], v)
		case float64:
			out[u.Tag] = append(out[u.Tag], int64(v))
		}
	}
	return out
}
