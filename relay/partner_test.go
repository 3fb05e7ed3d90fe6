package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// TestDiscoverPartnerFromConfig: a source configured with server A alone
// and discoverPartner runs as a pair: the relay logs the backup it found
// (B) once, and when A is killed the tag's values go on reaching NATS,
// from B.
func TestDiscoverPartnerFromConfig(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	servers, err := uaserver.StartPair(ctx, uaserver.WithTags(1), uaserver.WithPartnerDiscovery())
	if err != nil {
		t.Fatal(err)
	}
	defer servers.Close()
	tag := servers.Tags()[0]
	cfg, err := relay.Parse(fmt.Appendf(nil, `
nats: {servers: [%s]}
http: {listen: ""}
sources:
  - name: line1
    endpoints: [%s]
    discoverPartner: true
    tags:
      - {name: T, address: %q}
`, cl.URLs()[0], servers.A().Endpoint(), tag.NodeID().String()))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	r, err := relay.Start(ctx, cfg, relay.WithLogger(zerolog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := servers.B().Endpoint()
	testutil.WaitFor(t, "the backup found and its session up", 20*time.Second, func() bool {
		return strings.Contains(logs.String(), `"event":"partner found","endpoint":"`+b+`"`) &&
			strings.Contains(logs.String(), `"event":"session up","endpoint":"`+b+`"`)
	})

	nc, err := nats.Connect(cl.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe("apbridge.line1.T", msgs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	select {
	case <-msgs:
	case <-ctx.Done():
		t.Fatal("no value from A")
	}
	servers.A().Kill()
	testutil.WaitFor(t, "the failover to B", 20*time.Second, func() bool {
		return strings.Contains(logs.String(), `"event":"failover","endpoint":"`+servers.A().Endpoint()+`","member":"primary","to":"backup"`)
	})
	for len(msgs) > 0 { // what A sent
		<-msgs
	}
	// The ticks go on: A is dead, so three values from now on came from
	// B.
	for i := range 3 {
		select {
		case <-msgs:
		case <-ctx.Done():
			t.Fatalf("%d values after the failover to B", i)
		}
	}
	if n := strings.Count(logs.String(), `"event":"partner found"`); n != 1 {
		t.Fatalf("%d partner-found log lines, want 1", n)
	}
}
