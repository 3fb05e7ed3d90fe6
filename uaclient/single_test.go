package uaclient_test

import (
	"context"
	"testing"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/uaclient"
)

// TestPairSingleServer runs a Pair on one server: no standby session, the
// server's ServiceLevel followed, and a reset link reconnected to the same
// server. The level drop is the trigger a redundant pair acts on; the
// status shows it was seen, and no probe or failover follows.
func TestPairSingleServer(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 90}, noStart: true,
		cfg: func(c *uaclient.PairConfig) { c.Endpoints = c.Endpoints[:1] }})
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if !r.pair.Settings().Single {
		t.Fatal("one endpoint, but the settings are not single")
	}
	start := r.mark()
	if err := r.pair.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r.waitStatus("connected to the one server", func(st uaclient.PairStatus) bool {
		return st.Connected && st.Active == servicelevel.Primary
	})
	r.waitUpdates(start, 5, "data", dataFrom(servicelevel.Primary))

	r.servers.A().SetLevel(0)
	r.waitStatus("level 0 seen", func(st uaclient.PairStatus) bool {
		v, ok := st.ActiveLevel.Value()
		return ok && v == 0
	})
	r.servers.A().SetLevel(250)

	m := r.mark()
	r.servers.A().ResetConns()
	r.waitEvent(m, "the session lost", kind(uaclient.EventSessionLost))
	r.waitUpdates(r.mark(), 5, "data again after the reset", dataFrom(servicelevel.Primary))

	for _, k := range []uaclient.EventKind{uaclient.EventProbe, uaclient.EventFailover} {
		if evs := r.eventsSince(start, k); len(evs) > 0 {
			t.Fatalf("a single-server Pair sent %d %s events: %v", len(evs), k, evs[0])
		}
	}
	st := r.pair.Status()
	if st.Sessions[servicelevel.Backup] != uaclient.SessionDown {
		t.Fatalf("a standby session exists: %v", st.Sessions)
	}
	if n := r.servers.B().Stats().Sessions; n != 0 {
		t.Fatalf("the other server has %d sessions", n)
	}
}
