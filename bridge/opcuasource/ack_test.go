package opcuasource_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// withholdingSink is the core sink whose confirmations are withheld while
// held: its Flush does not return before release, as a sink whose broker
// has not confirmed does not. Its publishes go out as ever.
type withholdingSink struct {
	*bridge.CoreSink
	mu      sync.Mutex
	held    chan struct{} // closed by release; nil: not held
	flushes int
}

func (s *withholdingSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	held := s.held
	s.flushes++
	s.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.CoreSink.Flush(ctx)
}

func (s *withholdingSink) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

func (s *withholdingSink) flushCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushes
}

// ackEnv is a relay of a single OPC UA server's tags through a sink of the
// test's, with a subscriber counting per tag what the relay published.
type ackEnv struct {
	pair *uaserver.Pair
	b    *bridge.Bridge
	mu   sync.Mutex
	seqs map[string][]uint64
}

func startAckEnv(t *testing.T, sink func(*bridge.CoreSink) bridge.Sink, srcOpts ...opcuasource.Option) *ackEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, conn := testutil.ClusterConn(t)
	e := &ackEnv{seqs: map[string][]uint64{}}
	var err error
	if e.pair, err = uaserver.StartPair(ctx, uaserver.WithTags(4), uaserver.WithTagInterval(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pair.Close)
	nc, err := nats.Connect(cl.Node(2).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("apbridge.opc1.>", func(m *nats.Msg) {
		if u, err := wire.DecodeJSON(m.Data); err == nil {
			e.mu.Lock()
			e.seqs[u.Tag] = append(e.seqs[u.Tag], u.Seq)
			e.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// One server: the pair's backup endpoint is the same server, so that
	// every subscription the test looks at is on A.
	cfg := uaclient.PairConfig{Endpoints: []string{e.pair.A().Endpoint()}}
	src, err := opcuasource.New("opc1", cfg, srcOpts...)
	if err != nil {
		t.Fatal(err)
	}
	if e.b, err = bridge.New(conn, bridge.Config{}, bridge.WithSink(sink(bridge.NewCoreSink(conn)))); err != nil {
		t.Fatal(err)
	}
	var tags []bridge.TagConfig
	for _, tg := range e.pair.Tags() {
		tags = append(tags, bridge.TagConfig{Name: tg.Name, Address: tg.NodeID().String()})
	}
	if err := e.b.AddSource(src, tags); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	return e
}

// subs returns A's data subscription (the one with the tags' items) and
// its health subscription.
func (e *ackEnv) subs() (data, health uaserver.SubscriptionInfo, ok bool) {
	n := 0
	for _, s := range e.pair.A().Subscriptions() {
		switch {
		case s.Items == len(e.pair.Tags()):
			data, n = s, n+1
		case s.Items > 0:
			health = s
		}
	}
	return data, health, n == 1 && health.ID != 0
}

// gaps counts, over every tag, the relay's numbers the subscriber missed
// and the ones it saw twice.
func (e *ackEnv) gaps() (lost, dup, seen int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ss := range e.seqs {
		var prev uint64
		for _, s := range ss {
			seen++
			switch {
			case s <= prev:
				dup++
			case s > prev+1:
				lost += int(s - prev - 1)
			}
			prev = max(prev, s)
		}
	}
	return lost, dup, seen
}

// TestOPCUAAcknowledgesOnlyStored: while the sink withholds its
// confirmation, the server keeps every data message the relay received
// (the relay publishes them all the same); the health subscription's
// messages, which are acknowledged on receipt, are the control that
// acknowledgements do go out. Once the sink confirms, the data messages
// are acknowledged too, and the server holds no more than the latest few.
func TestOPCUAAcknowledgesOnlyStored(t *testing.T) {
	ws := &withholdingSink{held: make(chan struct{})}
	e := startAckEnv(t, func(cs *bridge.CoreSink) bridge.Sink { ws.CoreSink = cs; return ws })

	var data, health uaserver.SubscriptionInfo
	testutil.WaitFor(t, "10 data messages held by the server", 20*time.Second, func() bool {
		var ok bool
		data, health, ok = e.subs()
		return ok && len(data.Retained) >= 10
	})
	if _, _, seen := e.gaps(); seen == 0 {
		t.Fatal("nothing published while the sink withheld its confirmation")
	}
	if !slices.Contains(data.Retained, 1) {
		t.Fatalf("the server forgot data message 1 before the sink confirmed it (holds %v)", data.Retained)
	}
	if ws.flushCount() == 0 {
		t.Fatal("the relay never asked the sink whether its updates are stored")
	}
	// The control: the health subscription's messages are acknowledged
	// on receipt (its first ones were sent with the data's).
	testutil.WaitFor(t, "health messages acknowledged", 10*time.Second, func() bool {
		_, health, _ = e.subs()
		return !slices.Contains(health.Retained, 1)
	})

	ws.release()
	testutil.WaitFor(t, "data messages acknowledged once stored", 10*time.Second, func() bool {
		data, _, _ = e.subs()
		return !slices.Contains(data.Retained, 1) && len(data.Retained) <= 4
	})
	if lost, dup, _ := e.gaps(); lost != 0 || dup != 0 {
		t.Fatalf("relay lost %d and duplicated %d updates", lost, dup)
	}
}

// TestOPCUAUnstoredBacklogBounded: with the sink's confirmation withheld,
// the relay stops asking for more at its limit of unstored messages
// instead of taking (or dropping) more, while the server goes on
// producing; the server holds the rest. Released, the relay goes on
// without a hole in its numbering.
func TestOPCUAUnstoredBacklogBounded(t *testing.T) {
	const limit = 8
	ws := &withholdingSink{held: make(chan struct{})}
	e := startAckEnv(t, func(cs *bridge.CoreSink) bridge.Sink { ws.CoreSink = cs; return ws },
		opcuasource.WithPairOptions(uaclient.WithUnstoredLimit(limit)))
	testutil.WaitFor(t, "the unstored limit reached", 20*time.Second, func() bool {
		data, _, ok := e.subs()
		return ok && len(data.Retained) > limit
	})
	// The server goes on producing for 40 ticks (2 s).
	tick := e.pair.Tick()
	testutil.WaitFor(t, "40 more ticks", 20*time.Second, func() bool { return e.pair.Tick() >= tick+40 })
	data, _, _ := e.subs()
	// Each of the Publish requests outstanding at the limit may bring
	// one more message.
	if bound := limit + 4 + 1; len(data.Retained) > bound {
		t.Fatalf("the server holds %d messages the relay took and did not store: more than the %d the limit allows", len(data.Retained), bound)
	}
	ws.release()
	tick = e.pair.Tick()
	testutil.WaitFor(t, "relaying again", 20*time.Second, func() bool {
		data, _, _ = e.subs()
		return e.pair.Tick() >= tick+10 && len(data.Retained) <= 4
	})
	if lost, dup, _ := e.gaps(); lost != 0 || dup != 0 {
		t.Fatalf("relay lost %d and duplicated %d updates", lost, dup)
	}
}

// handoffs keeps the latest Handoff a Pair recorded.
type handoffs struct {
	mu   sync.Mutex
	last uaclient.Handoff
	n    int
}

func (h *handoffs) record(x uaclient.Handoff) {
	h.mu.Lock()
	h.last, h.n = x, h.n+1
	h.mu.Unlock()
}

func (h *handoffs) get() (uaclient.Handoff, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, h.n
}

// TestOPCUARecordsHandoff: what a successor needs is recorded: the
// server's subscription IDs, every tag's item, and how far the data
// messages are acknowledged, which stays at the first while the sink
// withholds its confirmation (the server holding them) and moves once it
// confirms.
func TestOPCUARecordsHandoff(t *testing.T) {
	ws := &withholdingSink{held: make(chan struct{})}
	var rec handoffs
	e := startAckEnv(t, func(cs *bridge.CoreSink) bridge.Sink { ws.CoreSink = cs; return ws },
		opcuasource.WithPairOptions(uaclient.WithHandoffRecorder(rec.record)))
	var data, health uaserver.SubscriptionInfo
	testutil.WaitFor(t, "the server holding 5 data messages", 20*time.Second, func() bool {
		var ok bool
		data, health, ok = e.subs()
		h, _ := rec.get()
		return ok && len(data.Retained) >= 5 && len(h.Items) == len(e.pair.Tags())
	})
	h, _ := rec.get()
	if h.DataSub != data.ID || h.HealthSub != health.ID || h.URL != e.pair.A().Endpoint() {
		t.Fatalf("handoff %+v: want data subscription %d and health %d on %s", h, data.ID, health.ID, e.pair.A().Endpoint())
	}
	if h.NextUnacked != 1 {
		t.Fatalf("handoff says messages before %d are acknowledged, but the sink confirmed none", h.NextUnacked)
	}
	nodes := map[string]bool{}
	for _, it := range h.Items {
		nodes[it.Node] = it.ID != 0
	}
	for _, tg := range e.pair.Tags() {
		if !nodes[tg.NodeID().String()] {
			t.Fatalf("handoff items %+v lack tag %s or its server ID", h.Items, tg.Name)
		}
	}
	ws.release()
	testutil.WaitFor(t, "the handoff following the acknowledgements", 10*time.Second, func() bool {
		h, _ := rec.get()
		data, _, _ = e.subs()
		return h.NextUnacked > 10 && (len(data.Retained) == 0 || data.Retained[0] >= h.NextUnacked-1)
	})
}
