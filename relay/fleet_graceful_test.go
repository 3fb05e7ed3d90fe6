package relay_test

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/rs/zerolog"
)

// sessionLostCounter counts the log lines that say a session was lost.
type sessionLostCounter struct{ n atomic.Int64 }

func (c *sessionLostCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`session on`)) && bytes.Contains(p, []byte(` lost`)) {
		c.n.Add(1)
	}
	return len(p), nil
}

// TestFleetGracefulHandoverTakesSubscriptionOver: two fleet relays with
// fleet.handoff and a JetStream sink; the owner of an OPC UA source shuts
// down (a graceful handover, with the default overlap) while the server
// goes on counting. The owner closes its instance, leaving the data
// subscription, and writes its final handoff before it releases the
// lease; the other relay wins the lease, transfers the subscription and
// asks for what the server held: every counter value is in the stream,
// one transfer is counted and no refresh. With the old order (the lease
// released first, the instance closed after the overlap) the two relays
// run the subscription at once.
func TestFleetGracefulHandoverTakesSubscriptionOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newFleetOPCUA(t, ctx)
	cl, pair := e.cl, e.pair
	// ra's sessions lost: in the overlap of the old order, its serving
	// session finds its subscription gone (transferred) and is lost
	// again and again until the instance closes.
	var raLost sessionLostCounter
	start := func(id string, servers []string) *relay.Relay {
		t.Helper()
		log := testutil.Logger(t).With().Str("relay", id).Logger()
		if id == "ra" {
			log = zerolog.New(zerolog.MultiLevelWriter(&raLost, log)).Level(zerolog.InfoLevel)
		}
		return e.start(id, servers, true, log)
	}
	a := start("ra", []string{cl.Node(0).DirectURL()})
	testutil.WaitFor(t, "ra to own and publish the source", 30*time.Second, func() bool {
		st := a.Bridge().Stats()
		return len(a.Fleet().Owned()) == 1 && len(st) == 1 && st[0].Published > 20
	})
	b := start("rb", []string{cl.Node(1).DirectURL(), cl.Node(2).DirectURL()})
	testutil.WaitFor(t, "ra's handoff in the bucket", 10*time.Second, func() bool {
		return readHandoff(ctx, t, cl) != nil
	})
	tick := pair.Tick()
	testutil.WaitFor(t, "10 more ticks", 10*time.Second, func() bool { return pair.Tick() >= tick+10 })

	items := func() (n uint64) {
		for _, s := range pair.Servers() {
			n += s.Stats().ItemsCreated
		}
		return n
	}
	itemsBefore := items()
	if err := a.Close(); err != nil {
		t.Logf("ra close: %v", err)
	}
	testutil.WaitFor(t, "rb to own the source", 20*time.Second, func() bool { return len(b.Fleet().Owned()) == 1 })
	tick = pair.Tick()
	// Well past the overlap: a subscription taken back by ra's recovery
	// would show as values missing here.
	e.waitStored("rb to store every counter up to the server's tick", int64(tick)+40)
	lost := e.lost()
	st := b.Bridge().Stats()[0]
	created := items() - itemsBefore
	t.Logf("graceful handover: lost %d counter values in the stream, rb transfers %d, fallbacks %d, refreshes %d; items created on the servers since ra's close %d; ra's sessions lost %d",
		lost, st.SuccessorTransfers, st.SuccessorFallbacks, st.Refreshes, created, raLost.n.Load())
	if n := raLost.n.Load(); n != 0 {
		t.Fatalf("ra's sessions were lost %d times while it handed the source over: the two relays ran the subscription at once", n)
	}
	if lost != 0 {
		t.Fatalf("the graceful handover lost %d counter values", lost)
	}
	if st.SuccessorTransfers != 1 || st.SuccessorFallbacks != 0 || st.Refreshes != 0 {
		t.Fatalf("rb transfers %d, fallbacks %d, refreshes %d; want 1, 0, 0", st.SuccessorTransfers, st.SuccessorFallbacks, st.Refreshes)
	}
	if rec := readHandoff(ctx, t, cl); rec == nil || !strings.Contains(string(rec), `"relay":"rb"`) {
		t.Fatalf("the bucket's handoff after the takeover is %s; want rb's", rec)
	}
}
