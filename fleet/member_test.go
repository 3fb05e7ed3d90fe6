package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// A member killed without handing over loses its pairs to the others once
// its leases expire.
func TestTakeoverAfterKill(t *testing.T) {
	cl := startJS(t)
	ps := pairs(6)
	a := join(t, cl.URLs(), cfg("a", ps))
	b := join(t, cl.URLs(), cfg("b", ps))
	c := join(t, cl.URLs(), cfg("c", ps))
	waitOwned(t, "one owner per pair", ps, a, b, c)
	testutil.WaitFor(t, "every member to own a pair", 10*time.Second, func() bool {
		return len(a.m.Owned()) > 0 && len(b.m.Owned()) > 0 && len(c.m.Owned()) > 0
	})
	had := a.m.Owned()
	a.nc.Close() // a crash: no handover, renewals stop
	testutil.WaitFor(t, "b and c to own every pair", 10*time.Second, func() bool {
		o := owners(b, c)
		for _, p := range ps {
			if len(o[p]) != 1 {
				return false
			}
		}
		return true
	})
	if _, ok := a.m.Valid(had[0]); ok {
		t.Errorf("the killed member still reports %s valid", had[0])
	}
}

// A member that closes hands every pair over at once; the others own them
// well before a lease could have expired.
func TestHandover(t *testing.T) {
	cl := startJS(t)
	ps := pairs(6)
	c := cfg("a", ps)
	c.LeaseTTL = 5 * time.Second // so that only a handover, not expiry, can move pairs in time
	a := join(t, cl.URLs(), c)
	c.RelayID = "b"
	b := join(t, cl.URLs(), c)
	waitOwned(t, "one owner per pair", ps, a, b)
	testutil.WaitFor(t, "a and b to share the pairs", 10*time.Second, func() bool {
		return len(a.m.Owned()) > 0 && len(b.m.Owned()) > 0
	})
	// a took every pair before b joined and handed b its share: those
	// are rebalancing handovers; what the close gives up comes after.
	testutil.WaitFor(t, "a's handovers to b to end", 10*time.Second, func() bool {
		return a.count(true) == a.count(false)+len(a.m.Owned())
	})
	before := len(a.causes())
	start := time.Now()
	a.close()
	waitOwned(t, "b to own every pair", ps, b)
	if d := time.Since(start); d >= c.LeaseTTL {
		t.Errorf("handover took %v, no faster than expiry (%v)", d, c.LeaseTTL)
	}
	for _, cause := range a.causes()[before:] {
		if cause != fleet.CauseShutdown {
			t.Errorf("a lost a pair with cause %s, want %s", cause, fleet.CauseShutdown)
		}
	}
}

// A member that joins takes the pairs it ranks first for, and only those:
// about 1/N move.
func TestRebalance(t *testing.T) {
	cl := startJS(t)
	ps := pairs(12)
	a := join(t, cl.URLs(), cfg("a", ps))
	b := join(t, cl.URLs(), cfg("b", ps))
	waitOwned(t, "one owner per pair", ps, a, b)
	testutil.WaitFor(t, "the pairs to settle on a and b", 10*time.Second, func() bool {
		return len(a.m.Owned())+len(b.m.Owned()) == len(ps) && placed(ps, []string{"a", "b"}, a, b)
	})
	before := owners(a, b)
	c := join(t, cl.URLs(), cfg("c", ps))
	testutil.WaitFor(t, "c to take its share", 10*time.Second, func() bool {
		return placed(ps, []string{"a", "b", "c"}, a, b, c)
	})
	after := owners(a, b, c)
	moved := 0
	for _, p := range ps {
		if before[p][0] != after[p][0] {
			moved++
			if after[p][0] != "c" {
				t.Errorf("%s moved from %s to %s: only moves to the new member are needed", p, before[p][0], after[p][0])
			}
		}
	}
	if moved == 0 || moved > len(ps)/3+2 {
		t.Errorf("%d of %d pairs moved, want about 1/3", moved, len(ps))
	}
}

// placed reports whether every pair is owned by its first-ranked member.
func placed(ps, live []string, rs ...*recorder) bool {
	o := owners(rs...)
	for _, p := range ps {
		if len(o[p]) != 1 || o[p][0] != fleet.Rank(p, live)[0] {
			return false
		}
	}
	return true
}

// Killing the node that leads the bucket's stream changes no owner: the
// renewals ride out the leader election. The positive control kills a
// member afterwards and sees its pairs move.
func TestKVLeaderKilled(t *testing.T) {
	cl := startJS(t)
	ps := pairs(6)
	c := cfg("a", ps)
	c.LeaseTTL = 2 * time.Second
	a := join(t, cl.URLs(), c)
	c.RelayID = "b"
	b := join(t, cl.URLs(), c)
	waitOwned(t, "one owner per pair", ps, a, b)
	testutil.WaitFor(t, "the pairs to settle", 10*time.Second, func() bool { return placed(ps, []string{"a", "b"}, a, b) })
	// The handovers of the start are told when their overlap ends: wait
	// until every gain but the current owners' has its loss.
	testutil.WaitFor(t, "the start's handovers to be told", 10*time.Second, func() bool {
		return a.count(true)+b.count(true)-a.count(false)-b.count(false) == len(ps)
	})
	gained, lost := a.count(true)+b.count(true), a.count(false)+b.count(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leader, err := cl.StreamLeader(ctx, "KV_leases")
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	// A TTL and a half: any lease whose renewals stalled in the election
	// would have been lost by then.
	deadline := time.Now().Add(3 * c.LeaseTTL / 2)
	for time.Now().Before(deadline) {
		if n := a.count(false) + b.count(false) - lost; n != 0 {
			t.Fatalf("%d pairs lost while the KV leader was killed: %v %v", n, a.causes(), b.causes())
		}
		time.Sleep(20 * time.Millisecond) // observing that nothing happens for a while
	}
	if g := a.count(true) + b.count(true); g != gained {
		t.Fatalf("%d pairs gained while the KV leader was killed", g-gained)
	}
	t.Logf("renewal failures during the election: a %d, b %d", a.m.Stats().RenewFailures, b.m.Stats().RenewFailures)
	// Positive control: a crash is seen.
	a.nc.Close()
	testutil.WaitFor(t, "b to take a's pairs", 10*time.Second, func() bool { return len(b.m.Owned()) == len(ps) })
}

// A member cut off from the cluster stops publishing (Valid false) before
// another wins its pairs, and the others take them over.
func TestPartitionedMemberFences(t *testing.T) {
	cl := startJS(t, natstest.WithProxies())
	ps := pairs(6)
	// a reaches the cluster only through node 0's proxy; b directly.
	a := join(t, []string{cl.Node(0).URL()}, cfg("a", ps))
	b := join(t, []string{cl.Node(1).DirectURL(), cl.Node(2).DirectURL()}, cfg("b", ps))
	waitOwned(t, "one owner per pair", ps, a, b)
	testutil.WaitFor(t, "a to own pairs", 10*time.Second, func() bool { return len(a.m.Owned()) > 0 })
	had := a.m.Owned()
	cl.Node(0).Proxy().Freeze()
	defer cl.Node(0).Proxy().Heal()
	// Watch both sides: a's pairs must be fenced at a before b may
	// publish for them.
	deadline := time.Now().Add(10 * time.Second)
	done := false
	for !done {
		if time.Now().After(deadline) {
			t.Fatal("b did not take a's pairs")
		}
		done = true
		for _, p := range had {
			_, aOK := a.m.Valid(p)
			_, bOK := b.m.Valid(p)
			if aOK && bOK {
				t.Fatalf("%s: a (partitioned) and b both valid owners", p)
			}
			done = done && bOK
		}
		time.Sleep(time.Millisecond) // sampling both sides
	}
	for _, p := range had {
		if _, ok := a.m.Valid(p); ok {
			t.Errorf("%s still valid at the partitioned member", p)
		}
	}
}

// A second member with a live member's ID is refused as soon as the live
// one renews its key, long before the key could expire (a TTL and a half
// was the wait before); another ID joins (the positive control).
func TestSameIDRefused(t *testing.T) {
	cl := startJS(t)
	ps := pairs(2)
	c := cfg("a", ps)
	c.LeaseTTL = 4 * time.Second // renewals every second; the old wait was 6 s
	join(t, cl.URLs(), c)
	nc := dial(t, cl.URLs()[1])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	m, err := fleet.Join(ctx, nc, c)
	took := time.Since(start)
	if !errors.Is(err, fleet.ErrSameID) {
		if m != nil {
			m.Close(ctx)
		}
		t.Fatalf("second member with ID a: err %v, want ErrSameID", err)
	}
	if took >= c.LeaseTTL {
		t.Errorf("refused after %v, not within a renewal period (%v)", took, c.LeaseTTL/4)
	}
	for _, want := range []string{`another live relay holds relayId "a" in bucket "leases"`, "give each relay of a fleet its own relayId"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	c.RelayID = "b"
	join(t, cl.URLs(), c)
}

// A relay that crashed leaves its key behind until the key expires; the
// relay restarted with the same ID claims it then, and is not refused.
func TestRestartedIDClaimed(t *testing.T) {
	cl := startJS(t)
	ps := pairs(2)
	a := join(t, cl.URLs(), cfg("a", ps))
	a.nc.Close() // a crash: the key stays, unrenewed
	nc := dial(t, cl.URLs()[1])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := fleet.Join(ctx, nc, cfg("a", ps))
	if err != nil {
		t.Fatalf("the restarted relay a: %v", err)
	}
	m.Close(ctx)
}

// A bucket that exists with other settings is refused with an error that
// names them.
func TestBucketMismatch(t *testing.T) {
	cl := startJS(t)
	nc := dial(t, cl.URLs()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases", TTL: 10 * time.Second, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := fleet.Join(ctx, nc, cfg("a", pairs(1)))
	if err == nil {
		t.Fatal("joined a bucket with the wrong settings")
	}
	for _, want := range []string{"TTL 10s", "leaseTTL is 1s", "1 replicas", "replicas is 3", "limit markers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Positive control: a bucket of its own is accepted.
	c := cfg("a", pairs(1))
	c.Bucket = "other"
	m, err := fleet.Join(ctx, nc, c)
	if err != nil {
		t.Fatal(err)
	}
	m.Close(ctx)
}

// A cluster without JetStream is refused with an error that says so.
func TestNoJetStream(t *testing.T) {
	cl := testutil.StartCluster(t)
	nc := dial(t, cl.URLs()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := fleet.Join(ctx, nc, cfg("a", pairs(1)))
	if err == nil || !strings.Contains(err.Error(), "no JetStream") {
		t.Fatalf("join without JetStream: %v, want an error that names JetStream", err)
	}
}
