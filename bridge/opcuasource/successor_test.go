package opcuasource_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// succEnv is a single OPC UA server whose counters a relay (a bridge with
// one OPC UA source) relays; the relay is abandoned and a successor
// started, and a subscriber keeps every counter value and refresh it saw.
type succEnv struct {
	t        *testing.T
	pair     *uaserver.Pair
	conn     *apconn.Conn
	endpoint string
	tags     []bridge.TagConfig
	counters map[string]bool // counter tags, by name
	static   string          // a setpoint's tag: its value is sent only by a new subscription

	mu       sync.Mutex
	values   map[string][]int64 // counter values by tag, in arrival order
	refresh  int                // updates inside a refresh
	statics  int                // the static tag's updates
	received int
}

func newSuccEnv(t *testing.T, serverOpts ...uaserver.Option) *succEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, conn := testutil.ClusterConn(t)
	e := &succEnv{t: t, conn: conn, values: map[string][]int64{}, counters: map[string]bool{}}
	var err error
	opts := append([]uaserver.Option{uaserver.WithTags(8), uaserver.WithTagInterval(50 * time.Millisecond), uaserver.WithSetpoints(1)}, serverOpts...)
	if e.pair, err = uaserver.StartPair(ctx, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pair.Close)
	e.endpoint = e.pair.A().Endpoint()
	for _, tg := range e.pair.Tags() {
		e.tags = append(e.tags, bridge.TagConfig{Name: tg.Name, Address: tg.NodeID().String()})
		if tg.Kind == uaserver.TagCounter {
			e.counters[tg.Name] = true
		}
	}
	e.static = e.pair.Setpoints()[0].Name
	nc, err := nats.Connect(cl.Node(2).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("apbridge.opc1.>", e.onMsg); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *succEnv) onMsg(m *nats.Msg) {
	u, err := wire.DecodeJSON(m.Data)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.received++
	if m.Header.Get(wire.HeaderRefresh) == "true" {
		e.refresh++
	}
	if u.Tag == e.static {
		e.statics++
	}
	if !e.counters[u.Tag] {
		return
	}
	switch v := u.Value.(type) {
	case int64:
		e.values[u.Tag] = append(e.values[u.Tag], v)
	case float64:
		e.values[u.Tag] = append(e.values[u.Tag], int64(v))
	}
}

// relay is one relay of the env's source.
type relay struct {
	b   *bridge.Bridge
	src *opcuasource.Source
}

// start starts a relay of the server's tags, with ack after store and
// the Pair's options given.
func (e *succEnv) start(opts ...uaclient.PairOption) *relay {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A queue that covers the relay's absence: the server keeps every
	// tick of the 20 Hz counters for 3.2 s.
	cfg := uaclient.PairConfig{Endpoints: []string{e.endpoint}, QueueSize: new(64)}
	src, err := opcuasource.New("opc1", cfg, opcuasource.WithLogger(testutil.Logger(e.t)), opcuasource.WithPairOptions(opts...))
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := bridge.New(e.conn, bridge.Config{})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := b.AddSource(src, e.tags); err != nil {
		e.t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	r := &relay{b: b, src: src}
	e.t.Cleanup(func() { r.b.Close() })
	testutil.WaitFor(e.t, "every tag subscribed", 30*time.Second, func() bool {
		st := b.Stats()
		return len(st) == 1 && st[0].Tags == len(e.tags) && st[0].NoValue+st[0].Failed < st[0].Tags
	})
	return r
}

// abandon ends r as a killed process ends: the server keeps its session
// and subscriptions. Its link is frozen, so that its close cannot reach
// the server, then the server's connections are reset, which drops what
// the close sent.
func (e *succEnv) abandon(r *relay) {
	e.pair.A().Freeze()
	r.b.Close()
	e.pair.A().ResetConns()
	e.pair.A().Heal()
}

// waitTicks waits until the server has moved n ticks on.
func (e *succEnv) waitTicks(n uint64) {
	e.t.Helper()
	tick := e.pair.Tick()
	testutil.WaitFor(e.t, fmt.Sprintf("%d ticks", n), 30*time.Second, func() bool { return e.pair.Tick() >= tick+n })
}

// waitCounter waits until every counter's latest value relayed is at or
// beyond the server's tick now.
func (e *succEnv) waitCaughtUp() {
	e.t.Helper()
	tick := int64(e.pair.Tick())
	testutil.WaitFor(e.t, "every counter relayed up to the server's tick", 30*time.Second, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for name := range e.counters {
			vs := e.values[name]
			if len(vs) == 0 || vs[len(vs)-1] < tick {
				return false
			}
		}
		return true
	})
}

// audit returns the counter values missing between each counter's first
// and last value relayed, and those relayed twice.
func (e *succEnv) audit() (lost, dup int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, vs := range e.values {
		seen := map[int64]bool{}
		lo, hi := vs[0], vs[0]
		for _, v := range vs {
			if seen[v] {
				dup++
			}
			seen[v] = true
			lo, hi = min(lo, v), max(hi, v)
		}
		lost += int(hi-lo+1) - len(seen)
	}
	return lost, dup
}

// refreshes returns the updates of refreshes and of the static tag so
// far: a new subscription sends the static tag's value, a subscription
// taken over does not.
func (e *succEnv) refreshes() (refresh, static int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refresh, e.statics
}

// TestOPCUASuccessorLosesNothing: a relay abandoned without a goodbye
// while the server goes on producing, and a successor started from its
// handoff 1 s later: the successor takes the data subscription over, asks
// for what the server held, and relays every counter value, without a
// refresh; the takeover is counted. The control: a successor without the
// handoff creates a new subscription, with a refresh, and the values of
// the gap are lost.
func TestOPCUASuccessorLosesNothing(t *testing.T) {
	for _, takeover := range []bool{true, false} {
		t.Run(fmt.Sprintf("takeover=%v", takeover), func(t *testing.T) {
			e := newSuccEnv(t)
			var rec handoffs
			r1 := e.start(uaclient.WithHandoffRecorder(rec.record))
			testutil.WaitFor(t, "a handoff with every item", 20*time.Second, func() bool {
				h, _ := rec.get()
				return len(h.Items) == len(e.tags)
			})
			e.waitTicks(10)
			e.abandon(r1)
			e.waitTicks(20) // 1 s without a relay
			h, _ := rec.get()
			refreshBefore, staticBefore := e.refreshes()
			var opts []uaclient.PairOption
			if takeover {
				opts = append(opts, uaclient.WithTakeover(h))
			}
			r2 := e.start(opts...)
			e.waitTicks(10)
			e.waitCaughtUp()
			lost, dup := e.audit()
			st := r2.src.Stats()
			refresh, static := e.refreshes()
			refreshed, statics := refresh-refreshBefore, static-staticBefore
			t.Logf("handoff %d items, from message %d; lost %d, duplicated %d, refresh updates %d, static updates %d, transfers %d",
				len(h.Items), h.NextUnacked, lost, dup, refreshed, statics, st.SuccessorTransfers)
			if !takeover {
				if lost == 0 || statics == 0 || st.SuccessorTransfers != 0 {
					t.Fatalf("without the handoff: lost %d, static updates %d, transfers %d; want a loss, a new subscription, no transfer",
						lost, statics, st.SuccessorTransfers)
				}
				return
			}
			if lost != 0 || dup != 0 {
				t.Fatalf("the successor lost %d and duplicated %d counter values", lost, dup)
			}
			if refreshed != 0 || statics != 0 {
				t.Fatalf("%d updates of a refresh, %d of the static tag after the takeover: a new subscription", refreshed, statics)
			}
			if st.SuccessorTransfers != 1 || st.SuccessorFallbacks != 0 {
				t.Fatalf("transfers %d, fallbacks %d; want 1, 0", st.SuccessorTransfers, st.SuccessorFallbacks)
			}
			if bs := r2.b.Stats(); bs[0].SuccessorTransfers != 1 || bs[0].Refreshes != 0 {
				t.Fatalf("bridge stats: successor transfers %d, refreshes %d; want 1, 0", bs[0].SuccessorTransfers, bs[0].Refreshes)
			}
		})
	}
}

// TestOPCUASuccessorFallsBack: the server restarted while no relay was
// there, so the predecessor's subscription is gone: the successor's
// transfer fails, it creates new subscriptions with a refresh, and counts
// the fallback.
func TestOPCUASuccessorFallsBack(t *testing.T) {
	e := newSuccEnv(t)
	var rec handoffs
	r1 := e.start(uaclient.WithHandoffRecorder(rec.record))
	testutil.WaitFor(t, "a handoff with every item", 20*time.Second, func() bool {
		h, _ := rec.get()
		return len(h.Items) == len(e.tags)
	})
	e.abandon(r1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.pair.A().Restart(ctx, uaserver.LevelPrimary); err != nil {
		t.Fatal(err)
	}
	h, _ := rec.get()
	_, staticBefore := e.refreshes()
	r2 := e.start(uaclient.WithTakeover(h))
	testutil.WaitFor(t, "the static tag's value: a new subscription", 20*time.Second, func() bool {
		_, static := e.refreshes()
		return static > staticBefore
	})
	st := r2.src.Stats()
	if st.SuccessorTransfers != 0 || st.SuccessorFallbacks != 1 {
		t.Fatalf("transfers %d, fallbacks %d; want 0, 1", st.SuccessorTransfers, st.SuccessorFallbacks)
	}
	if bs := r2.b.Stats(); bs[0].SuccessorFallbacks != 1 {
		t.Fatalf("bridge stats: successor fallbacks %d, want 1", bs[0].SuccessorFallbacks)
	}
}

// TestOPCUAGracefulCloseLeavesSubscription: with
// WithKeepSubscriptionAtClose a relay's close leaves its data subscription
// on the server (and deletes its health subscription), and a successor
// takes it over; the control: without the option the close deletes both.
func TestOPCUAGracefulCloseLeavesSubscription(t *testing.T) {
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			e := newSuccEnv(t)
			var rec handoffs
			opts := []uaclient.PairOption{uaclient.WithHandoffRecorder(rec.record)}
			if keep {
				opts = append(opts, uaclient.WithKeepSubscriptionAtClose())
			}
			r1 := e.start(opts...)
			testutil.WaitFor(t, "a handoff with every item", 20*time.Second, func() bool {
				h, _ := rec.get()
				return len(h.Items) == len(e.tags)
			})
			e.waitTicks(5)
			r1.b.Close()
			h, _ := rec.get()
			subs := e.pair.A().Subscriptions()
			var ids []uint32
			for _, s := range subs {
				ids = append(ids, s.ID)
			}
			if !keep {
				if len(subs) != 0 {
					t.Fatalf("subscriptions %v left after a close that deletes them", ids)
				}
				return
			}
			if len(subs) != 1 || subs[0].ID != h.DataSub {
				t.Fatalf("subscriptions %v left, want the data subscription %d alone", ids, h.DataSub)
			}
			e.waitTicks(10)
			r2 := e.start(uaclient.WithTakeover(h))
			e.waitTicks(5)
			e.waitCaughtUp()
			if lost, dup := e.audit(); lost != 0 || dup != 0 {
				t.Fatalf("the successor lost %d and duplicated %d counter values", lost, dup)
			}
			if st := r2.src.Stats(); st.SuccessorTransfers != 1 {
				t.Fatalf("transfers %d, want 1", st.SuccessorTransfers)
			}
		})
	}
}
