package edge_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/edge"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
)

// site is a relay at an edge site: its connections on the site's leaf
// nodes, storing into the site stream, on a simulated source.
type site struct {
	rl   *relay.Relay
	src  *simsource.Shared
	view *simsource.Relay
}

const (
	siteStream = "SITE"
	hubStream  = "PLANT"
)

// startEdge starts the edge topology of a test, the hub logging to it.
func startEdge(t *testing.T) *natstest.Edge {
	t.Helper()
	return testutil.StartEdge(t, natstest.EdgeOptions{Hub: []natstest.Option{natstest.WithLogger(testutil.Logger(t))}})
}

// edgeConfig is the relay's configuration at the site of e.
func edgeConfig(e *natstest.Edge) *relay.Config {
	return &relay.Config{
		NATS: relay.NATSConfig{Servers: e.Site.URLs()},
		SinkConfig: relay.SinkConfig{Sink: relay.SinkJetStream, JetStream: jetstreamsink.Config{
			Stream: siteStream, Domain: e.SiteDomain, Replicas: 3, MaxBytes: 256 << 20, AckTimeout: time.Second,
		}},
		Edge: &edge.Config{Hub: edge.Hub{Domain: e.HubDomain, Stream: hubStream}, OutageFloor: time.Minute, CheckInterval: time.Second},
	}
}

// startSite starts the relay at the site with a source of n tags that the
// test drives, and the hub stream that sources the site stream.
func startSite(t *testing.T, e *natstest.Edge, n int) *site {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src := simsource.NewShared("line1")
	t.Cleanup(func() { src.Close() })
	tags := make([]bridge.TagConfig, n)
	for i := range tags {
		tags[i] = bridge.TagConfig{Name: fmt.Sprintf("T%03d", i), Address: fmt.Sprintf("ns=1;s=T%03d", i)}
	}
	view := src.Relay()
	rl, err := relay.Start(ctx, edgeConfig(e), relay.WithLogger(testutil.Logger(t)), relay.WithSource(view, tags))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rl.Shutdown(ctx)
	})
	if err := e.SourceFromSite(ctx, hubStream, siteStream, 3); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the tags subscribed", 10*time.Second, func() bool { return src.Sim().Subscribed() == n })
	return &site{rl: rl, src: src, view: view}
}

// check runs the relay's edge monitor now.
func (s *site) check(t *testing.T) edge.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := s.rl.Edge().Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (s *site) stored() uint64 {
	st := s.rl.JetStream().Stats()
	return st.Acked - st.Duplicates
}

// hubMsgs is how many messages the hub stream holds.
func hubMsgs(e *natstest.Edge) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return natstest.StreamMsgs(ctx, e.Hub, hubStream)
}

// auditHub stops the source, waits for the site stream to have
// everything and the hub to have caught up with it, and compares the hub
// stream with what the source produced.
func (s *site) auditHub(t *testing.T, e *natstest.Edge) natstest.StreamAudit {
	t.Helper()
	s.src.Close()
	testutil.WaitFor(t, "the relay to take every update", 60*time.Second, s.view.Idle)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.rl.JetStream().Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := s.stored()
	testutil.WaitFor(t, "the hub to catch up", 60*time.Second, func() bool { return hubMsgs(e) >= want })
	nc, err := e.HubConn()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	stored, err := natstest.ReadStream(ctx, nc, hubStream)
	if err != nil {
		t.Fatal(err)
	}
	b := s.rl.Bridge()
	expected := s.src.ExpectedIDs(func(tag string) string { subj, _ := b.Subject(s.src.Name(), tag); return subj })
	return natstest.Audit(expected, stored)
}

// TestRelayRidesOutAWANOutage is the edge site's promise: while the WAN
// is cut or frozen the relay at the site stores on (the site stream
// acknowledges thousands of updates the hub cannot have), and when the WAN
// is back the hub stream has every update once and in order. The control
// is the hub itself: it gains nothing while the WAN is down, so the outage
// was real. The relay's monitor sees the hub go and come back and keeps
// count of what the hub lacks. That the site does not slow down during an
// outage is a matter of speed, measured by the wan-outage benchmark.
func TestRelayRidesOutAWANOutage(t *testing.T) {
	for _, fault := range []string{"cut", "freeze"} {
		t.Run(fault, func(t *testing.T) {
			e := startEdge(t)
			s := startSite(t, e, 20)
			s.src.Sim().Run(20 * time.Millisecond)
			testutil.WaitFor(t, "the hub to source updates", 30*time.Second, func() bool { return hubMsgs(e) > 1000 })
			before := s.check(t)
			if !before.Hub.Reachable || !before.Hub.Sourcing || !before.UnsourcedKnown {
				t.Fatalf("edge check with the WAN up: %+v", before)
			}

			switch fault {
			case "cut":
				e.CutWAN()
				testutil.WaitFor(t, "the leaf connections to go", 10*time.Second, func() bool { return e.LeafConns() == 0 })
			case "freeze":
				e.FreezeWAN()
			}
			// What was on its way when the WAN went down may still land;
			// after that the hub must hold still.
			atCut := s.stored()
			testutil.WaitFor(t, "updates stored at the site during the outage", 30*time.Second, func() bool { return s.stored() > atCut+500 })
			hubBefore := hubMsgs(e)
			testutil.WaitFor(t, "more updates stored at the site during the outage", 30*time.Second, func() bool { return s.stored() > atCut+1500 })
			if got := hubMsgs(e); got != hubBefore {
				t.Fatalf("the hub went from %d to %d messages while the WAN was down: the outage did not cut it off", hubBefore, got)
			}
			// The relay's monitor, during the outage: the hub cannot be
			// asked, and what it lacks is counted from its last known
			// position, not forgotten.
			during := s.check(t)
			if during.Hub.Reachable || !during.UnsourcedKnown || during.Unsourced < 1000 || during.Hub.LastCaughtUp.IsZero() {
				t.Errorf("edge check during the WAN %s: reachable %v, unsourced %d (known %v), last caught up %v",
					fault, during.Hub.Reachable, during.Unsourced, during.UnsourcedKnown, during.Hub.LastCaughtUp)
			}
			if !slices.ContainsFunc(during.Warnings, func(w string) bool { return strings.Contains(w, "cannot be asked") }) {
				t.Errorf("no warning of the hub out of reach: %v", during.Warnings)
			}
			e.HealWAN()

			a := s.auditHub(t, e)
			if !a.OK() || a.Stored != a.Expected {
				t.Fatalf("hub stream after a WAN %s: %v", fault, a)
			}
			after := s.check(t)
			if !after.Hub.Reachable || !after.Hub.CaughtUp || after.Unsourced != 0 || !after.Hub.LastCaughtUp.After(during.Hub.LastCaughtUp) ||
				after.AbsorbLimit != "maxBytes" || len(after.Warnings) > 0 {
				t.Errorf("edge check after the catch-up: %+v", after)
			}
			t.Logf("WAN %s: %d updates, all at the hub once and in order", fault, a.Expected)
		})
	}
}

// TestAbsorbUnderTheFloorWarns: the check warns when the site stream, at
// the current rate, absorbs a shorter outage than edge.outageFloor, and
// not when it absorbs a longer one (the control, on the same stream).
func TestAbsorbUnderTheFloorWarns(t *testing.T) {
	e := startEdge(t)
	s := startSite(t, e, 20)
	s.src.Sim().Run(20 * time.Millisecond)
	testutil.WaitFor(t, "the hub to source updates", 30*time.Second, func() bool { return hubMsgs(e) > 1000 })
	nc := s.rl.Conn().Active()
	site := edge.Site{Domain: e.SiteDomain, Stream: siteStream}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		floor time.Duration
		warn  bool
	}{{8760 * time.Hour, true}, {time.Minute, false}} {
		cfg := *edgeConfig(e).Edge
		cfg.OutageFloor = c.floor
		r, err := edge.Check(ctx, nc, cfg, site)
		if err != nil {
			t.Fatal(err)
		}
		if r.Unbounded || r.Site.RateMsgs <= 0 || r.AbsorbLimit != "maxBytes" {
			t.Fatalf("floor %v: rate %.0f/s, absorb %v (%s, unbounded %v)", c.floor, r.Site.RateMsgs, r.Absorb, r.AbsorbLimit, r.Unbounded)
		}
		warned := slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "less than edge.outageFloor") })
		if warned != c.warn {
			t.Errorf("floor %v, absorb %v: warned %v, want %v (%v)", c.floor, r.Absorb, warned, c.warn, r.Warnings)
		}
	}
}
