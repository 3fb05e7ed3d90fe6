package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/nodeopcua"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBrowsedAndListedNodeRelayedOnce: a browse root that reaches a node
// already listed (there by namespace index, in the browse by namespace
// URI) relays it once, under the listed name.
func TestBrowsedAndListedNodeRelayedOnce(t *testing.T) {
	srv := nodeopcua.StartT(t, nodeopcua.Config{Namespaces: []string{"urn:other", "urn:apbridge:interop"}})
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	idx, err := srv.NamespaceIndex(ctx, "urn:apbridge:interop")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := relay.Parse(fmt.Appendf(nil, `
nats: {servers: [%s]}
http: {listen: ""}
sources:
  - name: plc
    endpoints: [%s]
    tags:
      - {name: MyCounter, address: "ns=%d;s=Counter"}
    browse:
      - {node: "i=85", maxDepth: 2, include: ["Interop.*"]}
`, cl.URLs()[0], srv.Endpoint, idx))
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.Start(ctx, cfg, relay.WithLogger(testutil.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Browsed in the background, once the bridge runs: the tags arrive
	// in one batch.
	testutil.WaitFor(t, "the browsed tags", 30*time.Second, func() bool {
		_, ok := r.Bridge().Subject("plc", "Interop.Name")
		return ok
	})
	got := map[string]bool{}
	for _, tag := range []string{"MyCounter", "Interop.Counter", "Interop.Name", "Interop.Setpoint"} {
		_, got[tag] = r.Bridge().Subject("plc", tag)
	}
	want := map[string]bool{"MyCounter": true, "Interop.Counter": false, "Interop.Name": true, "Interop.Setpoint": true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tags relayed %v, want %v", got, want)
	}
}
