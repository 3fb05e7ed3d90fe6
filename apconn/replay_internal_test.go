package apconn

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

// TestReplaySendsWhatWasPublished publishes on a real broker through the
// Conn's own path, reusing one message and one header map for every
// publish as the bridge does: held first (no target), then released onto
// a member, then live, then all of it sent again to a new member of the
// same broker, as after a reconnect. A subscriber must get every message
// with the headers it was published with, each time it is sent: the
// ledger builds the held and the sent-again messages from its records.
func TestReplaySendsWhatWasPublished(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := natstest.Start(ctx, natstest.WithNodes(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	url := cl.Node(0).URL()
	pubNC, err := nats.Connect(url, cl.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer pubNC.Close()
	subNC, err := nats.Connect(url, cl.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer subNC.Close()
	const held, live = 300, 100
	got := make(chan *nats.Msg, 2*(held+live))
	if _, err := subNC.ChanSubscribe("replay.>", got); err != nil {
		t.Fatal(err)
	}
	if err := subNC.Flush(); err != nil {
		t.Fatal(err)
	}

	c := &Conn{}
	c.pub.ledger.max = 1 << 30
	c.pub.released = make(chan struct{})
	want := map[string]nats.Header{}
	m := &nats.Msg{Header: nats.Header{}}
	publish := func(i int) {
		t.Helper()
		seq := strconv.Itoa(i)
		data := []byte(`{"seq":` + seq + `}`)
		clear(m.Header)
		m.Subject, m.Data = "replay."+seq, data
		m.Header["Apb-Seq"] = []string{string(data[7 : len(data)-1])}
		if i%3 == 0 {
			m.Header["Apb-Refresh"] = []string{"true"}
		}
		if i%5 == 0 {
			m.Header["X-Many"] = []string{"a", seq}
		}
		want[m.Subject] = maps.Clone(m.Header)
		if err := c.PublishOwned(m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range held {
		publish(i)
	}
	if _, ok := c.pub.release(&member{gen: 1, nc: pubNC}, false); !ok {
		t.Fatal("release failed")
	}
	for i := held; i < held+live; i++ {
		publish(i)
	}
	// Nothing confirmed: a reconnect sends everything again.
	replayed, ok := c.pub.release(&member{gen: 2, nc: pubNC}, true)
	if !ok || replayed != held+live {
		t.Fatalf("sent again %d (ok %v), want %d", replayed, ok, held+live)
	}
	seen := map[string]int{}
	for range 2 * (held + live) {
		select {
		case r := <-got:
			w, ok := want[r.Subject]
			if !ok || !maps.EqualFunc(r.Header, w, slices.Equal) {
				t.Fatalf("%s came with headers %v, was published with %v", r.Subject, r.Header, w)
			}
			seen[r.Subject]++
		case <-ctx.Done():
			t.Fatalf("got %d messages of %d", len(seen), 2*(held+live))
		}
	}
	for s := range want {
		if seen[s] != 2 {
			t.Fatalf("%s came %d times, want 2 (published, sent again)", s, seen[s])
		}
	}
}
