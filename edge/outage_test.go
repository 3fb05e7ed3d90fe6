package edge_test

import (
	"context"
	"fmt"
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
	rl  *relay.Relay
	src *simsource.Shared
}

const (
	siteStream = "SITE"
	hubStream  = "PLANT"
)

func startEdge(t *testing.T) *natstest.Edge {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := natstest.StartEdge(ctx, natstest.EdgeOptions{Hub: []natstest.Option{natstest.WithLogger(testutil.Logger(t))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// edgeConfig is the relay's configuration at the site of e.
func edgeConfig(e *natstest.Edge) *relay.Config {
	return &relay.Config{
		NATS: relay.NATSConfig{Servers: e.Site.URLs()},
		SinkConfig: relay.SinkConfig{Sink: relay.SinkJetStream, JetStream: jetstreamsink.Config{
			Stream: siteStream, Domain: e.SiteDomain, Replicas: 3, MaxBytes: 64 << 20, AckTimeout: time.Second,
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
	rl, err := relay.Start(ctx, edgeConfig(e), relay.WithLogger(testutil.Logger(t)), relay.WithSource(src.Relay(), tags))
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
	return &site{rl: rl, src: src}
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
// is cut or frozen the relay at the site stores on without noticing (no
// backpressure, every update acknowledged by the site stream), and when
// the WAN is back the hub stream has every update once and in order. The
// control is the hub itself: it gains nothing while the WAN is down, so
// the outage was real.
func TestRelayRidesOutAWANOutage(t *testing.T) {
	for _, fault := range []string{"cut", "freeze"} {
		t.Run(fault, func(t *testing.T) {
			e := startEdge(t)
			s := startSite(t, e, 50)
			s.src.Sim().Run(20 * time.Millisecond)
			testutil.WaitFor(t, "the hub to source updates", 30*time.Second, func() bool { return hubMsgs(e) > 1000 })

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
			testutil.WaitFor(t, "updates stored at the site during the outage", 30*time.Second, func() bool { return s.stored() > atCut+1000 })
			hubBefore := hubMsgs(e)
			testutil.WaitFor(t, "more updates stored at the site during the outage", 30*time.Second, func() bool { return s.stored() > atCut+3000 })
			if got := hubMsgs(e); got != hubBefore {
				t.Fatalf("the hub went from %d to %d messages while the WAN was down: the outage did not cut it off", hubBefore, got)
			}
			e.HealWAN()

			a := s.auditHub(t, e)
			if !a.OK() || a.Stored != a.Expected {
				t.Fatalf("hub stream after a WAN %s: %v", fault, a)
			}
			if st := s.rl.JetStream().Stats(); st.Blocked > 0 {
				t.Errorf("the relay at the site was held %d times (%.0f ms) during a WAN %s: the site stream should take everything", st.Blocked, st.BlockedMs, fault)
			}
			t.Logf("WAN %s: %d updates, all at the hub once and in order", fault, a.Expected)
		})
	}
}
