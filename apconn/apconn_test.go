package apconn_test

import (
	"encoding/binary"
	"os"

	"context"
	"github.com/rs/zerolog"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/testcluster"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// events collects a Conn's events for assertions.
type events struct {
	mu  sync.Mutex
	all []apconn.Event
	ch  chan apconn.Event
}

func newEvents() *events { return &events{ch: make(chan apconn.Event, 256)} }

func (e *events) handle(ev apconn.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	select {
	case e.ch <- ev:
	default:
	}
}

// reset forgets the events received so far, so that wait sees only what
// follows.
func (e *events) reset() {
	for {
		select {
		case <-e.ch:
		default:
			return
		}
	}
}

// wait returns the next event of kind k, failing the test after d.
func (e *events) wait(t *testing.T, k apconn.EventKind, d time.Duration) apconn.Event {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == k {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v event within %v; events: %v", k, d, e.kinds())
		}
	}
}

func (e *events) count(k apconn.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

func (e *events) kinds() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.all {
		out = append(out, ev.Kind.String()+"/"+ev.Cause.String())
	}
	return out
}

func startCluster(t *testing.T, opts ...testcluster.NATSOption) *testcluster.NATSCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := testcluster.StartNATS(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func connect(t *testing.T, cl *testcluster.NATSCluster, ev *events, opts ...apconn.Option) *apconn.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all := append([]apconn.Option{
		apconn.WithLogger(testLogger(t)),
		apconn.WithNATSOptions(cl.ClientOptions()...),
		apconn.WithEventHandler(ev.handle),
	}, opts...)
	c, err := apconn.Connect(ctx, cl.URLs(), all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Connect returns after one attempt to arm the passive; on a loaded
	// machine the end-to-end proof can take longer, and a test that needs
	// a full pair waits for it.
	running := 0
	for _, n := range cl.Nodes() {
		if n.Running() {
			running++
		}
	}
	if running > 1 {
		waitStatus(t, c, apconn.StatusConnected, 10*time.Second)
	}
	return c
}

// waitStatus polls c until it reports st.
func waitStatus(t *testing.T, c *apconn.Conn, st apconn.Status, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for c.Status() != st {
		if time.Now().After(deadline) {
			t.Fatalf("status %v, want %v", c.Status(), st)
		}
		time.Sleep(5 * time.Millisecond) // poll with a deadline
	}
}

func activeNode(t *testing.T, cl *testcluster.NATSCluster, c *apconn.Conn) *testcluster.Node {
	t.Helper()
	s, ok := c.ActiveServer()
	if !ok {
		t.Fatal("no active")
	}
	n := cl.NodeByServerID(s.ID)
	if n == nil {
		t.Fatalf("active server %s is not a cluster node", s.ID)
	}
	return n
}

func passiveNode(t *testing.T, cl *testcluster.NATSCluster, c *apconn.Conn) *testcluster.Node {
	t.Helper()
	s, ok := c.PassiveServer()
	if !ok {
		t.Fatal("no passive")
	}
	n := cl.NodeByServerID(s.ID)
	if n == nil {
		t.Fatalf("passive server %s is not a cluster node", s.ID)
	}
	return n
}

// traffic runs a 1 kHz publisher and a subscriber through c.
func traffic(t *testing.T, c *apconn.Conn, subj string) *testcluster.Traffic {
	t.Helper()
	tr := testcluster.NewTraffic(c, subj, time.Millisecond)
	if _, err := c.Subscribe(subj, func(m *nats.Msg) { tr.Observe(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	tr.Start()
	t.Cleanup(tr.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.WaitReceived(ctx, 50); err != nil {
		t.Fatal(err)
	}
	return tr
}

func settle(t *testing.T, tr *testcluster.Traffic) testcluster.TrafficReport {
	t.Helper()
	tr.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr.Settle(ctx)
	return tr.Report()
}

// testLogger writes the Conn's log to the test log when APCONN_LOG is set.
func testLogger(t *testing.T) zerolog.Logger {
	if os.Getenv("APCONN_LOG") == "" {
		return zerolog.Nop()
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"}).Level(zerolog.DebugLevel).With().Timestamp().Logger()
}

func putSeq(buf []byte, seq uint64) {
	binary.BigEndian.PutUint64(buf[0:8], seq)
	binary.BigEndian.PutUint64(buf[8:16], uint64(time.Now().UnixNano()))
}
