// Package sourcetest is a conformance suite for bridge.Source
// implementations: what every source must do however its servers behave.
// A source's package runs it from a test with a Harness that starts the
// source's servers (real ones: an OPC UA pair, gateways) up or down:
//
//	func TestConformance(t *testing.T) {
//		sourcetest.Run(t, sourcetest.Harness{Conn: conn, Servers: startServers})
//	}
//
// The suite checks the source lifecycle the bridge relies on: Start never
// waits for a server, Close during Start returns, a source whose servers
// come up late delivers every tag once they do, a dead source holds up no
// other source of the same bridge, and a wrapper forwards the optional
// interfaces of the source it wraps.
package sourcetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/nats-io/nats.go"
)

// Servers are the servers of one source under test (an OPC UA server
// pair, a gateway pair, a simulation), started by Harness.Servers.
type Servers interface {
	// NewSource returns a new source named name on these servers, not
	// started. The suite closes it.
	NewSource(t *testing.T, name string) bridge.Source
	// Tags returns the tags to subscribe: at least one, every one of
	// which the servers update on their own at least once a second.
	Tags() []bridge.TagConfig
	// Up brings servers that were started down up.
	Up(t *testing.T)
}

// Harness is what the suite needs of an implementation.
type Harness struct {
	// Conn is an ApConnection on a running NATS cluster, which the
	// bridges the suite builds publish on and its checks subscribe
	// through.
	Conn *apconn.Conn
	// Servers starts the servers of one source: up, or down (every server
	// stopped or unreachable, as after a maintenance night). They stop at
	// the end of the test (t.Cleanup).
	Servers func(t *testing.T, up bool) Servers
	// Wrap, for a source that wraps others (as a fleet relay's leased
	// source does), returns a wrapper around sources that newInner builds,
	// started and ready once the bridge has started it. The suite checks
	// that the wrapper forwards the optional interfaces of what it wraps.
	Wrap func(t *testing.T, name string, newInner func() bridge.Source) bridge.Source
}

// Patience bounds every wait of the suite: what a correct source does
// within a few seconds (a connect, a subscribe, the first updates) and a
// source that waits for its servers never does.
const Patience = 30 * time.Second

// Run runs every case of the suite as a subtest of t.
func Run(t *testing.T, h Harness) {
	t.Run("StartReturnsWithServersDown", func(t *testing.T) { startReturnsWithServersDown(t, h) })
	t.Run("CloseDuringStart", func(t *testing.T) { closeDuringStart(t, h) })
	t.Run("ServersUpLate", func(t *testing.T) { serversUpLate(t, h) })
	t.Run("DeadSourceHoldsUpNoOther", func(t *testing.T) { deadSourceHoldsUpNoOther(t, h) })
	if h.Wrap != nil {
		t.Run("WrapperForwardsOptionalInterfaces", func(t *testing.T) { wrapperForwards(t, h) })
	}
}

// startReturnsWithServersDown: Start returns while every server is down,
// and the source says it is not connected (the control that the servers
// really are down).
func startReturnsWithServersDown(t *testing.T, h Harness) {
	src := h.Servers(t, false).NewSource(t, "down")
	rec := Discard{}
	done := make(chan error, 1)
	go func() { done <- src.Start(context.Background(), rec) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start with every server down: %v (a source retries on its own schedule, it does not fail)", err)
		}
	case <-time.After(Patience):
		t.Fatalf("Start did not return in %v with every server down: it waits for a server", Patience)
	}
	if st := src.Health().State; st.Connected() {
		t.Errorf("with every server down the source reports %s: the servers are not down, the test proves nothing", st)
	}
	closeWithin(t, src)
}

// closeDuringStart: Close called while Start runs returns, and so does
// Start.
func closeDuringStart(t *testing.T, h Harness) {
	src := h.Servers(t, false).NewSource(t, "closing")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- src.Start(ctx, Discard{}) }()
	closed := make(chan error, 1)
	go func() { closed <- src.Close() }()
	for i, ch := range []chan error{closed, started} {
		select {
		case <-ch:
		case <-time.After(Patience):
			cancel() // the bridge ends Start's context at Close too
			t.Fatalf("%s did not return in %v when Close was called during Start", [...]string{"Close", "Start"}[i], Patience)
		}
	}
}

// serversUpLate: a bridge started while the source's servers are down runs
// (Start returns, the bridge is not ready and says why), and relays every
// tag once the servers come up.
func serversUpLate(t *testing.T, h Harness) {
	srv := h.Servers(t, false)
	b, obs := newBridge(t, h.Conn)
	src := srv.NewSource(t, "late")
	if err := b.AddSource(src, srv.Tags()); err != nil {
		t.Fatal(err)
	}
	startWithin(t, b)
	if ok, why := b.Ready(); ok || len(why) != 1 {
		t.Fatalf("with the servers down the bridge reports ready %v %q, want not ready naming the source", ok, why)
	}
	if n := obs.total(); n != 0 {
		t.Fatalf("%d updates with every server down: the servers are not down, the test proves nothing", n)
	}
	srv.Up(t)
	obs.waitEveryTag(t, b, src.Name(), srv.Tags())
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// deadSourceHoldsUpNoOther: of two sources of one bridge, the first added
// has every server down; the second relays every tag, the bridge says
// which source it waits for, and it closes.
func deadSourceHoldsUpNoOther(t *testing.T, h Harness) {
	dead, live := h.Servers(t, false), h.Servers(t, true)
	b, obs := newBridge(t, h.Conn)
	deadSrc, liveSrc := dead.NewSource(t, "dead"), live.NewSource(t, "live")
	if err := b.AddSource(deadSrc, dead.Tags()); err != nil {
		t.Fatal(err)
	}
	if err := b.AddSource(liveSrc, live.Tags()); err != nil {
		t.Fatal(err)
	}
	startWithin(t, b)
	obs.waitEveryTag(t, b, liveSrc.Name(), live.Tags())
	ok, why := b.Ready()
	if ok || len(why) != 1 {
		t.Fatalf("ready %v %q, want not ready naming the dead source only", ok, why)
	}
	if n := obs.of(b, deadSrc.Name(), dead.Tags()); n != 0 {
		t.Fatalf("%d updates from the source whose servers are down: the test proves nothing", n)
	}
	shutdownWithin(t, b)
}

// wrapperForwards: a wrapper answers the optional interfaces of what it
// wraps, with the wrapped source's values.
func wrapperForwards(t *testing.T, h Harness) {
	const bound = 42 * time.Second
	src := h.Wrap(t, "wrapped", func() bridge.Source { return &probe{name: "wrapped", bound: bound} })
	b, obs := newBridge(t, h.Conn)
	if err := b.AddSource(src, probeTags); err != nil {
		t.Fatal(err)
	}
	startWithin(t, b)
	obs.waitEveryTag(t, b, src.Name(), probeTags)
	rb, ok := src.(bridge.ReplyBounder)
	if !ok {
		t.Errorf("%T does not forward bridge.ReplyBounder", src)
	} else if got := rb.SubscribeReplyBound(); got != bound {
		t.Errorf("SubscribeReplyBound %v, want the wrapped source's %v", got, bound)
	}
	lr, ok := src.(bridge.LinkReporter)
	if !ok {
		t.Fatalf("%T does not forward bridge.LinkReporter", src)
	}
	if r, p := lr.LinkRecoveries(); r != probeRecovered || p != probeRepublished {
		t.Errorf("LinkRecoveries %d, %d, want the wrapped source's %d, %d", r, p, probeRecovered, probeRepublished)
	}
}

var bridges atomic.Uint64

// newBridge returns a bridge on conn with a prefix and subjects of its
// own, closed at the end of the test, and an observer of its subjects.
func newBridge(t *testing.T, conn *apconn.Conn) (*bridge.Bridge, *observer) {
	t.Helper()
	n := bridges.Add(1)
	root := fmt.Sprintf("sourcetest%d", n)
	// The service subjects (health events among them) under a root of
	// their own: the observer counts tag updates only.
	b, err := bridge.New(conn, bridge.Config{Prefix: root + "-svc", Subject: root + ".{source}.{tag}"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, observe(t, conn, root+".>")
}

func startWithin(t *testing.T, b *bridge.Bridge) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Start(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(Patience):
		t.Fatalf("Bridge.Start did not return in %v: a source holds it", Patience)
	}
}

func shutdownWithin(t *testing.T, b *bridge.Bridge) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case <-done:
	case <-time.After(Patience):
		t.Fatalf("Bridge.Close did not return in %v", Patience)
	}
}

func closeWithin(t *testing.T, src bridge.Source) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- src.Close() }()
	select {
	case <-done:
	case <-time.After(Patience):
		t.Fatalf("Close did not return in %v", Patience)
	}
}

// observer counts the updates published under a subject pattern, by
// subject.
type observer struct {
	mu sync.Mutex
	n  map[string]int
}

func observe(t *testing.T, conn *apconn.Conn, pattern string) *observer {
	t.Helper()
	o := &observer{n: map[string]int{}}
	nc := conn.Active()
	if nc == nil {
		t.Fatal("the harness's connection has no active broker")
	}
	sub, err := nc.Subscribe(pattern, func(m *nats.Msg) {
		o.mu.Lock()
		o.n[m.Subject]++
		o.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return o
}

func (o *observer) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.n {
		n += c
	}
	return n
}

// of counts the updates of a source's tags.
func (o *observer) of(b *bridge.Bridge, source string, tags []bridge.TagConfig) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, tg := range tags {
		subj, _ := b.Subject(source, tg.Name)
		n += o.n[subj]
	}
	return n
}

// waitEveryTag waits until every tag of source has reached NATS at least
// twice: a first value and a change.
func (o *observer) waitEveryTag(t *testing.T, b *bridge.Bridge, source string, tags []bridge.TagConfig) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for {
		var missing []string
		o.mu.Lock()
		for _, tg := range tags {
			subj, ok := b.Subject(source, tg.Name)
			if !ok {
				o.mu.Unlock()
				t.Fatalf("source %s has no tag %s", source, tg.Name)
			}
			if o.n[subj] < 2 {
				missing = append(missing, tg.Name)
			}
		}
		o.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, tags of source %s without two updates on NATS: %v (stats %+v)", Patience, source, missing, b.Stats())
		}
		time.Sleep(10 * time.Millisecond) // poll with a deadline
	}
}
