package relay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/mxgateway"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// TestFleetSuccessorResumesGatewaySession: two fleet relays and a
// JetStream sink, one MxAccess gateway source on a simulated gateway
// counting at 50 Hz; the owner is cut off from NATS (its link frozen)
// while the gateway goes on counting and sending to it. It stores nothing
// more and gives the source up a TTL after its last renewal, leaving its
// gateway session open; the other relay wins the lease, reads the
// owner's handoff from the bucket and resumes the session's event stream
// after the last stored event: the gateway replays what the dead owner
// received and never stored, and the stream has every counter value, no
// session opened, one takeover counted. The controls: without the
// handoff the new owner opens a new session and the values the cut-off
// owner received are lost, no takeover counted; on a gateway that does
// not advertise event-resume the new owner falls back to a new session,
// the fallback counted, and serves on.
func TestFleetSuccessorResumesGatewaySession(t *testing.T) {
	noResume := slices.DeleteFunc(mxsim.DefaultCapabilities(), func(c string) bool { return c == mxgateway.CapEventResume })
	for _, tc := range []struct {
		name    string
		handoff bool
		caps    []string
	}{
		{"resume", true, mxsim.DefaultCapabilities()},
		{"no-handoff", false, mxsim.DefaultCapabilities()},
		{"no-resume", true, noResume},
	} {
		t.Run(tc.name, func(t *testing.T) { testFleetMxSuccessor(t, tc.handoff, tc.caps) })
	}
}

// fleetMx is two fleet relays' world for a gateway source: the fleetOPCUA
// world's cluster and stream audit (no OPC UA pair), a simulated gateway
// counting, and relays of one gateway source, gw1, storing into FH.
type fleetMx struct {
	*fleetOPCUA
	data *mxsim.Data
	gw   *mxsim.Gateway
	tags string
}

func newFleetMx(t *testing.T, ctx context.Context, caps []string) *fleetMx {
	t.Helper()
	e := &fleetMx{fleetOPCUA: &fleetOPCUA{t: t, ctx: ctx, counters: map[string]bool{}}, data: mxsim.NewData()}
	e.cl = testutil.StartCluster(t, natstest.WithJetStream(), natstest.WithProxies())
	t.Cleanup(e.data.RunCounters("C_", 4, 20*time.Millisecond))
	e.gw = testutil.StartGateways(t, e.data, 1)[0]
	e.gw.SetCapabilities(caps)
	var tags strings.Builder
	for i := range 4 {
		fmt.Fprintf(&tags, "      - {name: c%d, address: C_%d.Value}\n", i, i)
		e.counters[fmt.Sprintf("c%d", i)] = true
	}
	e.tags = tags.String()
	return e
}

// start starts fleet relay id on servers, closed when the test ends.
func (e *fleetMx) start(id string, servers []string, handoff bool, log zerolog.Logger, nopts ...nats.Option) *relay.Relay {
	e.t.Helper()
	cfg, err := relay.Parse(fmt.Appendf(nil, `
nats: {servers: [%s]}
http: {listen: ""}
instance: %s
service: {prefix: fh-%s}
sink: jetstream
jetstream: {stream: FH, replicas: 1}
fleet: {relayId: %s, leaseTTL: 1s, dwell: 10m, bucket: fh, replicas: 1, handoff: %v}
sources:
  - name: gw1
    type: mxgateway
    endpoints: [%s]
    tags:
%s`, strings.Join(servers, ", "), id, id, id, handoff, e.gw.Addr(), e.tags))
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

// count is the gateway's counter value now.
func (e *fleetMx) count() int64 {
	v, _, _, _ := e.data.Get("C_0.Value")
	n, _ := v.(int64)
	return n
}

func testFleetMxSuccessor(t *testing.T, handoff bool, caps []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newFleetMx(t, ctx, caps)
	cl := e.cl
	resumes := slices.Contains(caps, mxgateway.CapEventResume)
	logger := func(id string) zerolog.Logger { return testutil.Logger(t).With().Str("relay", id).Logger() }
	// ra reaches the cluster only through node 0's proxy, and starts
	// first: it owns the source, and keeps it (dwell 10 min).
	a := e.start("ra", []string{cl.Node(0).URL()}, handoff, logger("ra"), nats.IgnoreDiscoveredServers())
	testutil.WaitFor(t, "ra to own and publish the source", 30*time.Second, func() bool {
		st := a.Bridge().Stats()
		return len(a.Fleet().Owned()) == 1 && len(st) == 1 && st[0].Published > 40
	})
	b := e.start("rb", []string{cl.Node(1).DirectURL(), cl.Node(2).DirectURL()}, handoff, logger("rb"))
	if handoff {
		testutil.WaitFor(t, "ra's gateway handoff in the bucket", 10*time.Second, func() bool {
			rec := readHandoffOf(ctx, t, cl, "gw1")
			return strings.Contains(string(rec), `"lastStored"`) && strings.Contains(string(rec), `"relay":"ra"`)
		})
	}
	n := e.count()
	testutil.WaitFor(t, "10 more counts", 10*time.Second, func() bool { return e.count() >= n+10 })
	sessions := e.gw.Stats().CommandsByKind["Register"]

	cl.Node(0).Proxy().Freeze()
	defer cl.Node(0).Proxy().Heal()
	testutil.WaitFor(t, "rb to take the source", 20*time.Second, func() bool { return len(b.Fleet().Owned()) == 1 })
	e.waitStored("rb to store every counter up to the gateway's count", e.count()+5)
	lost := e.lost()
	st := b.Bridge().Stats()[0]
	opened := e.gw.Stats().CommandsByKind["Register"] - sessions
	t.Logf("handoff %v, resume %v: lost %d counter values in the stream, rb resumes %d, fallbacks %d, refreshes %d, sessions registered %d, ra fenced %d",
		handoff, resumes, lost, st.SuccessorTransfers, st.SuccessorFallbacks, st.Refreshes, opened, a.FleetFenced())
	switch {
	case !handoff:
		if lost == 0 || st.SuccessorTransfers != 0 || st.SuccessorFallbacks != 0 || opened != 1 {
			t.Fatalf("without the handoff: lost %d, resumes %d, fallbacks %d, sessions registered %d; want a loss, no takeover, a new session",
				lost, st.SuccessorTransfers, st.SuccessorFallbacks, opened)
		}
	case !resumes:
		if st.SuccessorFallbacks != 1 || st.SuccessorTransfers != 0 || opened != 1 {
			t.Fatalf("on a gateway without %s: resumes %d, fallbacks %d, sessions registered %d; want the fallback counted and a new session",
				mxgateway.CapEventResume, st.SuccessorTransfers, st.SuccessorFallbacks, opened)
		}
	default:
		if lost != 0 {
			t.Fatalf("the fleet's successor lost %d counter values", lost)
		}
		if st.SuccessorTransfers != 1 || st.SuccessorFallbacks != 0 || opened != 0 {
			t.Fatalf("rb resumes %d, fallbacks %d, sessions registered %d; want 1, 0, 0", st.SuccessorTransfers, st.SuccessorFallbacks, opened)
		}
	}
	if handoff {
		// The new owner records the session it serves, under its lease.
		testutil.WaitFor(t, "rb's gateway handoff in the bucket", 10*time.Second, func() bool {
			return strings.Contains(string(readHandoffOf(ctx, t, cl, "gw1")), `"relay":"rb"`)
		})
	}
}

// readHandoffOf returns the handoff record of source in the bucket of the
// fleet fh, nil when there is none.
func readHandoffOf(ctx context.Context, t *testing.T, cl *natstest.Cluster, source string) []byte {
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
	en, err := kv.Get(ctx, source)
	if err != nil {
		return nil
	}
	return en.Value()
}

// TestFleetGracefulHandoverResumesGatewaySession: two fleet relays with
// fleet.handoff; the owner of a gateway source shuts down (a graceful
// handover) while the gateway goes on counting. The owner closes its
// instance, leaving its gateway session open, and writes its final
// handoff before it releases the lease; the other relay wins the lease
// and resumes the session's stream after the last stored event: every
// counter value is in the stream, one resume is counted, no session is
// opened, and the gateway is asked to resume the stream once (the
// closed owner never takes it back).
func TestFleetGracefulHandoverResumesGatewaySession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newFleetMx(t, ctx, mxsim.DefaultCapabilities())
	cl := e.cl
	logger := func(id string) zerolog.Logger { return testutil.Logger(t).With().Str("relay", id).Logger() }
	a := e.start("ra", []string{cl.Node(0).DirectURL()}, true, logger("ra"))
	testutil.WaitFor(t, "ra to own and publish the source", 30*time.Second, func() bool {
		st := a.Bridge().Stats()
		return len(a.Fleet().Owned()) == 1 && len(st) == 1 && st[0].Published > 40
	})
	b := e.start("rb", []string{cl.Node(1).DirectURL(), cl.Node(2).DirectURL()}, true, logger("rb"))
	testutil.WaitFor(t, "ra's gateway handoff in the bucket", 10*time.Second, func() bool {
		return strings.Contains(string(readHandoffOf(ctx, t, cl, "gw1")), `"relay":"ra"`)
	})
	n := e.count()
	testutil.WaitFor(t, "10 more counts", 10*time.Second, func() bool { return e.count() >= n+10 })
	before := e.gw.Stats()
	if err := a.Close(); err != nil {
		t.Logf("ra close: %v", err)
	}
	testutil.WaitFor(t, "rb to own the source", 20*time.Second, func() bool { return len(b.Fleet().Owned()) == 1 })
	// Well past the handover: a stream taken back by ra would show as
	// resume requests, or values missing.
	e.waitStored("rb to store every counter up to the gateway's count", e.count()+40)
	lost := e.lost()
	st := b.Bridge().Stats()[0]
	gst := e.gw.Stats()
	registered := gst.CommandsByKind["Register"] - before.CommandsByKind["Register"]
	resumeRequests := gst.ResumeRequests - before.ResumeRequests
	t.Logf("graceful handover: lost %d counter values in the stream, rb resumes %d, fallbacks %d, refreshes %d; sessions registered %d, resume requests %d",
		lost, st.SuccessorTransfers, st.SuccessorFallbacks, st.Refreshes, registered, resumeRequests)
	if lost != 0 {
		t.Fatalf("the graceful handover lost %d counter values", lost)
	}
	if st.SuccessorTransfers != 1 || st.SuccessorFallbacks != 0 || st.Refreshes != 0 || registered != 0 {
		t.Fatalf("rb resumes %d, fallbacks %d, refreshes %d, sessions registered %d; want 1, 0, 0, 0",
			st.SuccessorTransfers, st.SuccessorFallbacks, st.Refreshes, registered)
	}
	if resumeRequests != 1 {
		t.Fatalf("%d resume requests on the gateway; want rb's one: the two relays ran the session's stream at once", resumeRequests)
	}
	testutil.WaitFor(t, "rb's gateway handoff in the bucket", 10*time.Second, func() bool {
		return strings.Contains(string(readHandoffOf(ctx, t, cl, "gw1")), `"relay":"rb"`)
	})
}
