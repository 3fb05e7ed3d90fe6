package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/nats-io/nats.go"
)

// A lease that a member released is free, and the member left takes it at
// once, even when the read Create makes of the deleted key is answered by
// a replica that lags. nats.go's Create tries a write for a new key,
// and when the key has history (the release left a delete marker) it reads
// the key's last revision with a direct get, which any replica of the
// bucket (and a mirror) may answer: one that has not applied the delete
// answers the old lease, and Create reports a key that exists. A member
// that took that for another's win marked the pair held by someone unknown
// and never tried again: with no other member to write the key, the pair
// stayed unowned.
//
// The stale replica here is a client subscribed to the direct gets of the
// lease key on the node the member uses; the bucket lives on another node,
// so the replica's answer, an early revision of the lease, comes first and
// is the one the reader takes.
func TestFreeLeaseTakenDespiteStaleRead(t *testing.T) {
	cl := startJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := cfg("a", []string{"p"})
	c.Replicas = 1
	// Only the handover can free the pair, and the release's marker
	// stays in the bucket (it ages out with the TTL, and a key without
	// history is created without a read).
	c.LeaseTTL = 60 * time.Second
	setup := c
	setup.RelayID, setup.Pairs = "setup", []string{"other"}
	first := join(t, cl.URLs(), setup) // creates the bucket
	leader, err := cl.StreamLeader(ctx, "KV_"+c.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	first.close()
	var node string
	for _, n := range cl.Nodes() {
		if n != leader {
			node = n.URL()
			break
		}
	}
	stale := dial(t, node)
	js, err := first.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	// What the lagging replica holds: the lease at an early revision,
	// told apart from any answer of the bucket's own by its revision.
	const staleRev = 1
	staleValue := []byte(`{"relay":"ghost","epoch":"0"}`)
	var asked atomic.Int32
	subject := "$KV." + c.Bucket + ".lease.p"
	_, err = stale.Subscribe("$JS.API.DIRECT.GET.KV_"+c.Bucket+"."+subject, func(m *nats.Msg) {
		asked.Add(1)
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Nats-Stream", "KV_"+c.Bucket)
		r.Header.Set("Nats-Subject", subject)
		r.Header.Set("Nats-Sequence", strconv.Itoa(staleRev))
		r.Header.Set("Nats-Time-Stamp", time.Now().UTC().Format(time.RFC3339Nano))
		r.Data = staleValue
		m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := stale.Flush(); err != nil {
		t.Fatal(err)
	}
	// The replica is live: a direct get from b's node gets the old lease
	// (the bucket's own answer comes later, over a route).
	probe := dial(t, node)
	pjs, _ := probe.JetStream()
	pkv, err := pjs.KeyValue(c.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	// Up to 200 reads, a few seconds: on a loaded machine the bucket's
	// answer can come first for a while.
	won, tries := 0, 0
	for deadline := time.Now().Add(3 * time.Second); won < 5 && tries < 200 && time.Now().Before(deadline); tries++ {
		if e, err := pkv.Get("lease.p"); err == nil && e.Revision() == staleRev {
			won++
		}
	}
	t.Logf("the stale replica answered first %d of %d reads", won, tries)
	if won == 0 {
		t.Fatal("the stale replica never answered first: the read Create makes would not be stale")
	}

	// Which answer a reader takes is a race the replica wins most of
	// the time (the control above); five handovers make a member that
	// trusts Create's read fail at least once.
	for round := range 5 {
		c.RelayID = fmt.Sprintf("a%d", round)
		a := join(t, []string{leader.URL()}, c)
		waitOwned(t, "a to own p", []string{"p"}, a)
		c.RelayID = fmt.Sprintf("b%d", round)
		b := join(t, []string{node}, c)
		start := time.Now()
		a.close()
		testutil.WaitFor(t, "b to own the released pair", 5*time.Second, func() bool {
			_, ok := b.m.Valid("p")
			return ok
		})
		// Read from the bucket's leader, past the stale replica.
		var h struct{ Relay string }
		if m, err := js.GetLastMsg("KV_"+c.Bucket, subject); err != nil || json.Unmarshal(m.Data, &h) != nil || h.Relay != c.RelayID {
			t.Fatalf("lease.p after the takeover: %v (%+v), want %s's", err, h, c.RelayID)
		}
		t.Logf("round %d: b owned p %v after a's release", round, time.Since(start))
		b.close()
	}
	if asked.Load() <= int32(tries) {
		t.Fatalf("the stale replica answered %d direct gets, all of them the control's: no takeover read the deleted key", asked.Load())
	}
}
