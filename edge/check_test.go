package edge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/edge"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A hub stream that sources the site through an ephemeral consumer starts
// its catch-up late after an outage over 10 s: the check says so. The
// positive control is a hub stream with a durable source (natstest's, as
// docs/edge.md configures it), checked the same way, without the warning.
func TestCheckWarnsOfAnEphemeralSource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testutil.StartEdge(t, natstest.EdgeOptions{HubNodes: 1, SiteNodes: 1})
	site, err := nats.Connect(e.Site.URLs()[0], e.Site.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer site.Close()
	sjs, err := jetstream.New(site)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sjs.CreateStream(ctx, jetstream.StreamConfig{Name: siteStream, Subjects: []string{"plant.>"}, MaxBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	hub, err := e.HubConn()
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hjs, err := jetstream.New(hub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hjs.CreateStream(ctx, jetstream.StreamConfig{Name: "EPHEMERAL", Sources: []*jetstream.StreamSource{{
		Name: siteStream, External: &jetstream.ExternalStream{APIPrefix: "$JS." + e.SiteDomain + ".API"},
	}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.SourceFromSite(ctx, "DURABLE", siteStream, 1); err != nil {
		t.Fatal(err)
	}
	const warning = "through an ephemeral consumer"
	for _, c := range []struct {
		hub  string
		warn bool
	}{{"EPHEMERAL", true}, {"DURABLE", false}} {
		cfg := edge.Config{Hub: edge.Hub{Domain: e.HubDomain, Stream: c.hub}, OutageFloor: time.Minute}.WithDefaults()
		r, err := edge.Check(ctx, site, cfg, edge.Site{Domain: e.SiteDomain, Stream: siteStream})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Hub.Sourcing {
			t.Fatalf("hub stream %s: not seen sourcing the site: %+v", c.hub, r.Hub)
		}
		warned := strings.Contains(strings.Join(r.Warnings, "\n"), warning)
		if warned != c.warn || r.Hub.Durable == c.warn {
			t.Errorf("hub stream %s: durable %v, warned %v, want warned %v: %q", c.hub, r.Hub.Durable, warned, c.warn, r.Warnings)
		}
	}
}
