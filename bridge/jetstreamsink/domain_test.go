package jetstreamsink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestJetStreamDomainSteersTheStream: with jetstream.domain the sink sets
// its stream up, checks its health and stores in the JetStream of that
// domain, wherever the relay is connected. The relay here is connected to
// the hub of an edge topology and names the site's domain: the stream is
// the site's, and the hub has none. The control is the same sink without
// a domain, whose stream lands in the hub's JetStream.
func TestJetStreamDomainSteersTheStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := testutil.StartEdge(t, natstest.EdgeOptions{HubNodes: 1, SiteNodes: 1})
	conn, err := apconn.Connect(ctx, e.Hub.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	streamIn := func(cl *natstest.Cluster, name string) bool {
		t.Helper()
		_, err := cl.StreamState(ctx, name)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	for _, c := range []struct {
		domain, stream string
		at             *natstest.Cluster
	}{
		{e.SiteDomain, "ATSITE", e.Site},
		{"", "ATHUB", e.Hub}, // the control: no domain, the connected server's JetStream
	} {
		cfg := jetstreamsink.Config{Stream: c.stream, Domain: c.domain, Subjects: []string{"plant.>"}, Replicas: 1}
		s, err := jetstreamsink.New(ctx, conn, cfg)
		if err != nil {
			t.Fatalf("domain %q: %v", c.domain, err)
		}
		h := s.CheckHealth(ctx)
		s.Close()
		if len(h.Blocking) > 0 {
			t.Errorf("domain %q: the health check found %v: it did not look where the stream is", c.domain, h.Blocking)
		}
		other := e.Hub
		if c.at == e.Hub {
			other = e.Site
		}
		if !streamIn(c.at, c.stream) || streamIn(other, c.stream) {
			t.Errorf("domain %q: stream %s at the %s: %v, at the other side: %v", c.domain, c.stream,
				map[bool]string{true: "hub", false: "site"}[c.at == e.Hub], streamIn(c.at, c.stream), streamIn(other, c.stream))
		}
	}
}
