package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// `apbridge edge status` shows the site stream, the hub's sourcing of it
// and the outage the site absorbs; a config without an edge section is
// refused.
func TestEdgeStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := testutil.StartEdge(t, natstest.EdgeOptions{HubNodes: 1, SiteNodes: 1})
	nc, err := nats.Connect(e.Site.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SITE", Subjects: []string{"plant.>"}, MaxBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := js.Publish(ctx, fmt.Sprintf("plant.t%d", i%10), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SourceFromSite(ctx, "PLANT", "SITE", 1); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`
nats: {servers: [%s]}
sink: jetstream
jetstream: {stream: SITE, domain: %s, replicas: 1, maxBytes: 1073741824, subjects: [plant.>]}
edge: {hub: {domain: %s, stream: PLANT}, outageFloor: 8760h}
sources:
  - name: line1
    endpoints: [opc.tcp://127.0.0.1:1]
    tags: [{name: t, address: "ns=2;s=T", subject: plant.t}]
`, e.Site.URLs()[0], e.SiteDomain, e.HubDomain)
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"edge", "status", "--config", path}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	t.Logf("apbridge edge status:\n%s", out.String())
	for _, want := range []string{"site stream SITE (domain site): 100 messages", "hub stream PLANT (domain hub): sources SITE", "absorbs: a WAN outage of",
		"WARNING: the site stream can absorb a WAN outage of"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status does not show %q:\n%s", want, out.String())
		}
	}

	statusRefusedWithout(t, "edge", cfg, fmt.Sprintf("edge: {hub: {domain: %s, stream: PLANT}, outageFloor: 8760h}\n", e.HubDomain))
}
