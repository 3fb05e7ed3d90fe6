package apconn_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// The helpers the package's tests share, one copy each: a NATS cluster and
// a Conn on it that the test's cleanup closes, an event recorder, the
// logger, and traffic that counts what is lost, duplicated or reordered.

// TestMain fails the run if any goroutine outlives the tests: every Conn,
// cluster and traffic generator started here must be stopped by cleanup.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// events collects a Conn's events for assertions.
type events struct {
	mu  sync.Mutex
	all []apconn.Event
	ch  chan apconn.Event
}

func newEvents() *events { return &events{ch: make(chan apconn.Event, 256)} }

// handle is the Conn's event handler. It never blocks: events beyond the
// channel's room are kept only in all, so a test that does not wait cannot
// stall the Conn.
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

// count returns how many events of kind k were received.
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

// kinds lists the events received as kind/cause, for failure messages.
func (e *events) kinds() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.all {
		out = append(out, ev.Kind.String()+"/"+ev.Cause.String())
	}
	return out
}

// The lame-duck timing of ldmCluster: nats-server's defaults (10 s grace,
// 2 min duration) scaled down so that a test sees a whole lame-duck
// shutdown, eviction included, in a few seconds.
const (
	testGrace = 1500 * time.Millisecond
	testLDM   = 2500 * time.Millisecond
)

// ldmCluster starts a cluster whose nodes use the test's lame-duck timing.
func ldmCluster(t *testing.T, opts ...natstest.Option) *natstest.Cluster {
	return testutil.StartCluster(t, append([]natstest.Option{natstest.WithLameDuck(testLDM, testGrace)}, opts...)...)
}

// runPast keeps traffic flowing until done is closed (the lame-duck node
// has evicted everyone and shut down), plus a few more messages.
func runPast(t *testing.T, tr *natstest.Traffic, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("lame-duck node did not shut down")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.WaitReceived(ctx, tr.Sent()+50); err != nil {
		t.Fatal(err)
	}
}

// connect connects a Conn to every node of cl, with events going to ev and
// the log to testLogger; the test's cleanup closes it.
func connect(t *testing.T, cl *natstest.Cluster, ev *events, opts ...apconn.Option) *apconn.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all := append([]apconn.Option{
		apconn.WithLogger(testutil.Logger(t)),
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

// activeNode returns the cluster node that holds c's active connection.
func activeNode(t *testing.T, cl *natstest.Cluster, c *apconn.Conn) *natstest.Node {
	t.Helper()
	s, ok := c.ActiveServer()
	return clusterNode(t, cl, "active", s, ok)
}

// passiveNode returns the cluster node that holds c's passive connection.
func passiveNode(t *testing.T, cl *natstest.Cluster, c *apconn.Conn) *natstest.Node {
	t.Helper()
	s, ok := c.PassiveServer()
	return clusterNode(t, cl, "passive", s, ok)
}

// clusterNode returns the node of server s, which holds c's role
// connection; ok false means there is none.
func clusterNode(t *testing.T, cl *natstest.Cluster, role string, s apconn.Server, ok bool) *natstest.Node {
	t.Helper()
	if !ok {
		t.Fatalf("no %s", role)
	}
	n := cl.NodeByServerID(s.ID)
	if n == nil {
		t.Fatalf("%s server %s is not a cluster node", role, s.ID)
	}
	return n
}

// thirdNode returns the node that holds neither the active nor the passive.
func thirdNode(t *testing.T, cl *natstest.Cluster, c *apconn.Conn) *natstest.Node {
	t.Helper()
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	for _, n := range cl.Nodes() {
		if n != a && n != p {
			return n
		}
	}
	t.Fatal("no third node")
	return nil
}

// traffic runs a 1 kHz publisher and a subscriber through c.
func traffic(t *testing.T, c *apconn.Conn, subj string) *natstest.Traffic {
	t.Helper()
	tr := natstest.NewTraffic(c, subj, time.Millisecond)
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

// settle stops tr, waits for the messages still in flight and reports.
func settle(t *testing.T, tr *natstest.Traffic) natstest.TrafficReport {
	t.Helper()
	tr.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr.Settle(ctx)
	return tr.Report()
}

// putSeq writes a sequence number and the send time into buf's first 16
// bytes, the layout natstest.Traffic reads back.
func putSeq(buf []byte, seq uint64) {
	binary.BigEndian.PutUint64(buf[0:8], seq)
	binary.BigEndian.PutUint64(buf[8:16], uint64(time.Now().UnixNano()))
}
