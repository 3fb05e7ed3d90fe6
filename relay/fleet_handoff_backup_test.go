package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/nats-io/nats.go"
)

// TestFleetSuccessorTakesBackupOver: the owner of an OPC UA pair serves
// from the backup, where it stayed after a failover (the primary went to
// ServiceLevel 0 and came back Healthy), when it is cut off from NATS.
// The next owner starts on the endpoint the handoff names, the backup, as
// its active: it takes the data subscription over there and asks for what
// the server held, and the stream has every counter value. Before, it
// started on the primary and connected the backup as its standby, which
// left the subscription behind: new subscriptions and a snapshot, and what
// the cut-off owner had received but not stored lost (a relay kill in the
// fleet soak after any failover of the pair). The relays' configs leave
// fleet.handoff out: the default keeps the handoff.
func TestFleetSuccessorTakesBackupOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newFleetOPCUA(t, ctx, natstest.WithProxies())
	cl, pair := e.cl, e.pair
	e.endpoints = pair.A().Endpoint() + ", " + pair.B().Endpoint()
	// fleet.handoff left out: its default is on.
	e.defaultHandoff = true
	pair.B().SetLevel(uaserver.LevelHealthyFollower)
	logger := testutil.Logger(t)
	a := e.start("ra", []string{cl.Node(0).URL()}, true, logger.With().Str("relay", "ra").Logger(), nats.IgnoreDiscoveredServers())
	serving := func(url string) func() bool {
		return func() bool {
			st := a.Bridge().Stats()
			return len(a.Fleet().Owned()) == 1 && len(st) == 1 && st[0].Health.Endpoint == url && st[0].Published > 20
		}
	}
	testutil.WaitFor(t, "ra to own and publish the source from the primary", 30*time.Second, serving(pair.A().Endpoint()))
	// The primary goes to 0: ra fails over to the Healthy backup, and
	// stays there when the primary is Healthy again.
	pair.A().SetLevel(uaserver.LevelMaintenance)
	testutil.WaitFor(t, "ra to serve from the backup", 30*time.Second, serving(pair.B().Endpoint()))
	pair.A().SetLevel(uaserver.LevelPrimary)
	b := e.start("rb", []string{cl.Node(1).DirectURL(), cl.Node(2).DirectURL()}, true, logger.With().Str("relay", "rb").Logger())
	testutil.WaitFor(t, "ra's handoff of the backup in the bucket", 10*time.Second, func() bool {
		return strings.Contains(string(readHandoff(ctx, t, cl)), `"serving":"backup"`)
	})
	tick := pair.Tick()
	testutil.WaitFor(t, "10 more ticks", 10*time.Second, func() bool { return pair.Tick() >= tick+10 })
	if st := a.Bridge().Stats()[0]; st.Health.Endpoint != pair.B().Endpoint() {
		t.Fatalf("ra serves from %s before the cut; want the backup %s", st.Health.Endpoint, pair.B().Endpoint())
	}
	// What ra stored before the cut is past the failover: the check
	// starts there.
	from := int64(pair.Tick()) - 5

	cl.Node(0).Proxy().Freeze()
	defer cl.Node(0).Proxy().Heal()
	testutil.WaitFor(t, "rb to take the source", 20*time.Second, func() bool { return len(b.Fleet().Owned()) == 1 })
	tick = pair.Tick()
	e.waitStored("rb to store every counter up to the server's tick", int64(tick)+5)
	lost := e.lostFrom(from)
	st := b.Bridge().Stats()[0]
	t.Logf("lost %d counter values from %d on, rb transfers %d, fallbacks %d, refreshes %d, serving from %s", lost, from,
		st.SuccessorTransfers, st.SuccessorFallbacks, st.Refreshes, st.Health.Endpoint)
	if st.SuccessorTransfers != 1 || st.SuccessorFallbacks != 0 {
		t.Fatalf("rb transfers %d, fallbacks %d; want 1, 0", st.SuccessorTransfers, st.SuccessorFallbacks)
	}
	if lost != 0 {
		t.Fatalf("the fleet's successor lost %d counter values", lost)
	}
	if st.Health.Endpoint != pair.B().Endpoint() {
		t.Fatalf("rb serves from %s; want the backup %s, whose subscription it took over", st.Health.Endpoint, pair.B().Endpoint())
	}
	if rec := string(readHandoff(ctx, t, cl)); !strings.Contains(rec, `"relay":"rb"`) || !strings.Contains(rec, `"serving":"backup"`) {
		t.Fatalf("the bucket's handoff after the takeover is %s; want rb's, of the backup", rec)
	}
}
