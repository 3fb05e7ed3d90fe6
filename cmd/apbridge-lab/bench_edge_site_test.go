package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestEdgeSiteProcess runs the WAN scenarios' site in a process of its own
// beside the hub's: the site's client URLs answer and store into an R3
// stream of the site's domain, the hub reaches the site's JetStream API
// across the leaf connections (so the site process said it was up only
// once linked), a lame-duck restart of the node a client is connected to
// comes back with the stream current, and an unknown command or an ldm
// of a URL that is no node's is refused in words.
func TestEdgeSiteProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := startWANWorld(ctx, benchConfig{hub: hubProcess, site: siteProcess, grace: time.Second, leafCompression: edgeLeafCompression})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if w.site != nil {
		t.Fatal("the site runs in this process")
	}
	nc, err := nats.Connect(strings.Join(w.siteURLs(), ","), append(w.siteOpts(), nats.MaxReconnects(-1))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.NewWithDomain(nc, w.siteDomain)
	if err != nil {
		t.Fatal(err)
	}
	const stream = "SITETEST"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"site.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "site.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	hub, err := w.hubConn()
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	if _, err := hub.Request("$JS."+w.siteDomain+".API.STREAM.INFO."+stream, nil, 5*time.Second); err != nil {
		t.Fatalf("the hub does not reach the site's stream: %v", err)
	}
	if err := w.ldmNode(ctx, nc.ConnectedUrl(), stream); err != nil {
		t.Fatalf("ldm of the connected node: %v", err)
	}
	if _, err := js.Publish(ctx, "site.a", []byte("2")); err != nil {
		t.Fatalf("publish after the node's restart: %v", err)
	}
	if err := w.ldmNode(ctx, "nats://127.0.0.1:1", stream); err == nil || !strings.Contains(err.Error(), "no site node at") {
		t.Fatalf("ldm of no node: %v", err)
	}
	for _, line := range []string{"explode", "ldm nats://127.0.0.1:1"} {
		if err := w.siteProc.do(line); err == nil {
			t.Fatalf("the site process accepted %q", line)
		}
	}
}

// TestEdgeSiteProcessEndsEarly: a site process that cannot start says why
// in the bench's error (its stderr), not only that it ended.
func TestEdgeSiteProcessEndsEarly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var addr edgeSiteAddr
	_, err := startLabProc(ctx, "site process", false, 0, &addr, "edge-site", "--leaf", "nats://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "--leaf, --hub and --domain are required") {
		t.Fatalf("error %v, want the process's own reason", err)
	}
}
