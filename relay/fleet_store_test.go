package relay_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
)

// TestFleetOPCUAAcknowledgesOnlyStored: a fleet relay's leased OPC UA
// source acknowledges a data message to its server only once the sink
// stored its updates, as outside a fleet. The relay's link to NATS is
// frozen for a while, well inside the lease's validity (TTL 10 s): the
// sink cannot confirm, and the server keeps every data message the relay
// received; the health subscription's messages, acknowledged on receipt,
// are the control that acknowledgements do go out. Healed, the data
// messages are acknowledged too.
func TestFleetOPCUAAcknowledgesOnlyStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := testutil.StartCluster(t, natstest.WithJetStream())
	proxy, err := faultproxy.New(strings.TrimPrefix(cl.Node(0).URL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	pair, err := uaserver.StartPair(ctx, uaserver.WithTags(4), uaserver.WithTagInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pair.Close)

	var tags []bridge.TagConfig
	for _, tg := range pair.Tags() {
		tags = append(tags, bridge.TagConfig{Name: tg.Name, Address: tg.NodeID().String()})
	}
	off := ""
	cfg := &relay.Config{
		NATS: relay.NATSConfig{Servers: []string{"nats://" + proxy.Addr()}}, HTTP: relay.HTTPConfig{Listen: &off},
		Instance: "r1", Service: relay.ServiceConfig{Prefix: "fleetack"},
		Fleet: &relay.FleetConfig{RelayID: "r1", LeaseTTL: 10 * time.Second, Bucket: "acks", Replicas: 1},
	}
	build := func() (bridge.Source, error) {
		return opcuasource.New("opc1", uaclient.PairConfig{Endpoints: []string{pair.A().Endpoint()}})
	}
	r, err := relay.Start(ctx, cfg, relay.WithSourceFactory("opc1", tags, build), relay.WithLogger(testutil.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })

	subs := func() (data, health uaserver.SubscriptionInfo, ok bool) {
		n := 0
		for _, s := range pair.A().Subscriptions() {
			switch {
			case s.Items == len(tags):
				data, n = s, n+1
			case s.Items > 0:
				health = s
			}
		}
		return data, health, n == 1 && health.ID != 0
	}
	testutil.WaitFor(t, "the leased source relaying, its messages acknowledged", 30*time.Second, func() bool {
		data, _, ok := subs()
		return ok && len(data.Retained) <= 4 && pair.Tick() > 20
	})
	proxy.Freeze()
	var data, health uaserver.SubscriptionInfo
	testutil.WaitFor(t, "10 more data messages held by the server", 20*time.Second, func() bool {
		data, health, _ = subs()
		return len(data.Retained) >= 10
	})
	if _, ok := r.Fleet().Valid("opc1"); !ok {
		t.Fatal("the lease is no longer valid: the test froze the link too long")
	}
	held := data.Retained[0]
	// The control: the health subscription's messages are acknowledged on
	// receipt, frozen link or not.
	if len(health.Retained) > 4 {
		t.Fatalf("the server holds %d health messages: acknowledgements do not go out at all", len(health.Retained))
	}
	proxy.Heal()
	testutil.WaitFor(t, "data messages acknowledged once stored", 20*time.Second, func() bool {
		data, _, _ = subs()
		return !slices.Contains(data.Retained, held) && len(data.Retained) <= 4
	})
}
