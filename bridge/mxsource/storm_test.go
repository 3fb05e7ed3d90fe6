package mxsource_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/mxsim"
)

// countingSource counts the subscribe requests running at once.
type countingSource struct {
	*mxsource.Source
	now, max atomic.Int32
}

func (c *countingSource) Subscribe(ctx context.Context, tags []bridge.Tag) ([]error, error) {
	n := c.now.Add(1)
	defer c.now.Add(-1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			break
		}
	}
	return c.Source.Subscribe(ctx, tags)
}

// The incident: a gateway whose commands outlive their deadline. The
// guard keeps one subscribe in flight, presumes a reply lost after its
// ceiling and sends once more; a restart mid-subscribe is one more; when
// the gateway answers again every tag comes back.
func TestWedgedGatewayIsNotStormed(t *testing.T) {
	data := mxsim.NewData()
	stop := data.RunCounters("Counter_", 20, 50*time.Millisecond)
	defer stop()
	g, err := mxsim.Start(data)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var wedged sync.Once
	g.OnCommand(func(_, kind string) {
		if kind == "SubscribeBulk" {
			wedged.Do(func() { g.SetCommandLatency(time.Hour) })
		}
	})
	src, err := mxsource.New("mx1", mxsource.Config{Endpoints: []string{g.Addr()}, CommandTimeout: time.Second,
		ReconnectDelay: 50 * time.Millisecond}, mxsource.WithLogger(testutil.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingSource{Source: src}
	var tags []bridge.TagConfig
	for i := range 20 {
		tags = append(tags, bridge.TagConfig{Name: "c" + string(rune('a'+i)), Address: "Counter_" + itoa(i) + ".Value"})
	}
	_, conn := testutil.ClusterConn(t)
	guard := bridge.GuardConfig{RetryFloor: 200 * time.Millisecond, RetryCeiling: time.Second, InFlightCeiling: 700 * time.Millisecond, Jitter: 0.5}
	b, err := bridge.New(conn, bridge.Config{Guard: guard}, bridge.WithLogger(testutil.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.AddSource(cs, tags); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stats := func() bridge.SourceStats { return b.Stats()[0] }
	// The gateway answers DEADLINE_EXCEEDED after 1 s, or the guard
	// presumes the reply lost after 0.7 s: either way a new request, one
	// at a time, with backoff.
	testutil.WaitFor(t, "the guard retrying", 10*time.Second, func() bool { return stats().SubscribeRequests >= 4 })
	if m := cs.max.Load(); m != 1 {
		t.Fatalf("%d subscribes in flight at once", m)
	}
	if st := g.Stats(); st.MaxPending > 4 {
		t.Fatalf("%d commands pending on the gateway: the client stacked them", st.MaxPending)
	}
	// A restart mid-subscribe: a fresh session, one subscribe at once.
	before := stats().SubscribeRequests
	g.Kill()
	g.SetCommandLatency(0)
	if err := g.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "every tag Good again", 10*time.Second, func() bool { s := stats(); return s.Good == 20 })
	if n := stats().SubscribeRequests - before; n > 3 {
		t.Fatalf("%d subscribe requests for one restart", n)
	}
	if m := cs.max.Load(); m != 1 {
		t.Fatalf("%d subscribes in flight at once", m)
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
