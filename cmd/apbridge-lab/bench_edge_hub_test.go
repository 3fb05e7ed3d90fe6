package main

import (
	"context"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
)

// TestEdgeHubProcess runs the WAN scenarios' hub in its process (this
// test binary, as the bench runs its own executable) and the site here:
// linked at the start, the site's leaf connections gone after the cut
// command and back after the heal. The cut's effect is its own positive
// control: the links were up before it.
func TestEdgeHubProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := startWANWorld(ctx, benchConfig{hub: hubProcess, grace: 2 * time.Second, leafCompression: edgeLeafCompression})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	leafs := func() int {
		n := 0
		for _, node := range w.site.Nodes() {
			if srv := node.Server(); srv != nil {
				if lz, err := srv.Leafz(&server.LeafzOptions{}); err == nil {
					n += lz.NumLeafs
				}
			}
		}
		return n
	}
	waitLeafs := func(what string, ok func(int) bool) {
		t.Helper()
		testutil.WaitFor(t, what+": the site's leaf connections", 30*time.Second, func() bool { return ok(leafs()) })
	}
	if got := leafs(); got != len(w.site.Nodes()) {
		t.Fatalf("linked site with %d leaf connections, want one per node (%d)", got, len(w.site.Nodes()))
	}
	if err := w.link.cut(); err != nil {
		t.Fatal(err)
	}
	waitLeafs("cut", func(n int) bool { return n == 0 })
	if err := w.link.heal(); err != nil {
		t.Fatal(err)
	}
	waitLeafs("healed", func(n int) bool { return n == len(w.site.Nodes()) })
	if err := w.link.slow(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The child refuses what it does not know, in words.
	if err := w.link.(*hubChild).do("explode"); err == nil {
		t.Fatal("the hub process accepted an unknown command")
	}
}
