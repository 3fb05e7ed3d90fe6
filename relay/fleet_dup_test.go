package relay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/sourcetest"
	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/nats-io/nats.go"
)

// A second relay given a live relay's relayId is refused before it starts
// anything: within a renewal period of the live relay (not after a TTL and
// a half), before its bridge serves or publishes (no event of its sources
// ever leaves it), and with none of its sources started.
func TestDuplicateRelayIDRefusedBeforeStart(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithJetStream())
	const ttl = 4 * time.Second // renewals every second; the old wait was 6 s
	off := ""
	config := func(instance, prefix string) *relay.Config {
		return &relay.Config{
			NATS: relay.NATSConfig{Servers: cl.URLs()}, HTTP: relay.HTTPConfig{Listen: &off},
			Instance: instance, Service: relay.ServiceConfig{Prefix: prefix},
			Fleet: &relay.FleetConfig{RelayID: "ra", Bucket: "dup", LeaseTTL: ttl, Dwell: 100 * time.Millisecond, Overlap: 100 * time.Millisecond},
		}
	}
	tags := []bridge.TagConfig{{Name: "t1", Address: "a1"}}
	src := simsource.NewShared("line1")
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := relay.Start(ctx, config("a", "fleet.a"),
		relay.WithSourceFactory("line1", tags, func() (bridge.Source, error) { return src.Relay(), nil }),
		relay.WithLogger(testutil.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	testutil.WaitFor(t, "relay a to own line1", 10*time.Second, func() bool { return len(a.Fleet().Owned()) == 1 })

	// Whatever the second relay's bridge would send goes under its own
	// prefix: its sources' events, first of all.
	nc, err := nats.Connect(cl.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	var got []string
	markers := 0
	sub, err := nc.Subscribe("fleet.dup.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if m.Subject == "fleet.dup.marker" {
			markers++
			return
		}
		got = append(got, m.Subject)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	var starts atomic.Int32
	start := time.Now()
	b, err := relay.Start(ctx, config("dup", "fleet.dup"),
		relay.WithSourceFactory("line1", tags, func() (bridge.Source, error) {
			return sourcetest.CountStarts(src.Relay(), &starts), nil
		}),
		relay.WithLogger(testutil.Logger(t)))
	took := time.Since(start)
	if err == nil {
		b.Close()
		t.Fatal("a second relay with relayId ra started")
	}
	if !errors.Is(err, fleet.ErrSameID) || !strings.Contains(err.Error(), `another live relay holds relayId "ra" in bucket "dup"`) {
		t.Errorf("error %v; want ErrSameID naming relayId ra and the live relay", err)
	}
	if took >= ttl {
		t.Errorf("refused after %v; want within a renewal period (%v)", took, ttl/4)
	}
	if n := starts.Load(); n != 0 {
		t.Errorf("%d of the refused relay's sources started", n)
	}
	// A marker through every node arrives behind anything the refused
	// relay published before it closed (one route per node pair, in
	// order).
	for _, n := range cl.Nodes() {
		mc, err := nats.Connect(n.URL(), nats.DontRandomize(), nats.IgnoreDiscoveredServers())
		if err != nil {
			t.Fatal(err)
		}
		mc.Publish("fleet.dup.marker", nil)
		mc.Flush()
		mc.Close()
	}
	testutil.WaitFor(t, "the markers", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return markers == len(cl.Nodes())
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) > 0 {
		t.Errorf("the refused relay's bridge started and published on %v", got)
	}
	// The live relay is untouched.
	if owned := a.Fleet().Owned(); len(owned) != 1 || a.Fleet().Err() != nil {
		t.Errorf("relay a owns %v (err %v) after the refusal, want line1", owned, a.Fleet().Err())
	}
}
