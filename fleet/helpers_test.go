package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// TestMain fails the run if a member's goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ttl is the lease TTL of the tests: short, so that expiry costs little.
const ttl = time.Second

func pairs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("pair%02d", i)
	}
	return out
}

// recorder is a member under test: its connection and every event.
type recorder struct {
	t  *testing.T
	nc *nats.Conn
	m  *fleet.Member

	mu     sync.Mutex
	events []fleet.Event
}

func (r *recorder) handle(e fleet.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// count returns how many events have the given ownership.
func (r *recorder) count(owned bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Owned == owned {
			n++
		}
	}
	return n
}

func (r *recorder) causes() []fleet.Cause {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []fleet.Cause
	for _, e := range r.events {
		if !e.Owned {
			out = append(out, e.Cause)
		}
	}
	return out
}

func cfg(id string, ps []string) fleet.Config {
	return fleet.Config{Bucket: "leases", LeaseTTL: ttl, RelayID: id, Pairs: ps, Dwell: 200 * time.Millisecond, Overlap: 100 * time.Millisecond}
}

// dial connects a plain client to url; cleanup closes it.
func dial(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// join connects to urls and joins; cleanup closes both.
func join(t *testing.T, urls []string, c fleet.Config, opts ...fleet.Option) *recorder {
	t.Helper()
	nc, err := nats.Connect(urls[0], nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		func(o *nats.Options) error { o.Servers = urls; return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r := &recorder{t: t, nc: nc}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := fleet.Join(ctx, nc, c, append([]fleet.Option{fleet.WithHandler(r.handle), fleet.WithLogger(testutil.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("join %s: %v", c.RelayID, err)
	}
	r.m = m
	t.Cleanup(func() { r.close() })
	return r
}

func (r *recorder) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.m.Close(ctx)
}

// owners maps each pair to the members that may publish for it now.
func owners(rs ...*recorder) map[string][]string {
	out := map[string][]string{}
	for _, r := range rs {
		for _, p := range r.m.Config().Pairs {
			if _, ok := r.m.Valid(p); ok {
				out[p] = append(out[p], r.m.ID())
			}
		}
	}
	return out
}

// waitOwned waits until every pair has exactly one valid owner among rs.
func waitOwned(t *testing.T, what string, ps []string, rs ...*recorder) {
	t.Helper()
	testutil.WaitFor(t, what, 10*time.Second, func() bool {
		o := owners(rs...)
		for _, p := range ps {
			if len(o[p]) != 1 {
				return false
			}
		}
		return true
	})
}

func startJS(t *testing.T, opts ...natstest.Option) *natstest.Cluster {
	return testutil.StartCluster(t, append([]natstest.Option{natstest.WithJetStream()}, opts...)...)
}
