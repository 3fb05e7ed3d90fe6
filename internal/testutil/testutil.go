// Package testutil holds the helpers that the module's tests share: a test
// logger, polling with a deadline, a log buffer safe for concurrent writes,
// an ApConnection on an embedded cluster, and gateway simulators. Only tests import it.
package testutil

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// logEnv is the environment variable that turns test logging on: with it
// set, Logger writes to the test's log (shown with -v or on failure).
const logEnv = "APBRIDGE_TEST_LOG"

// Logger returns a logger that writes to t's log when APBRIDGE_TEST_LOG is
// set, and a no-op logger otherwise.
func Logger(t testing.TB) zerolog.Logger {
	if os.Getenv(logEnv) == "" {
		return zerolog.Nop()
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: zerolog.TestWriter{T: t}, TimeFormat: "15:04:05.000", NoColor: true}).
		Level(zerolog.DebugLevel).With().Timestamp().Logger()
}

// WaitFor polls cond until it holds, and fails the test with what when d
// passes first.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond) // poll with a deadline
	}
}

// SyncBuffer is an io.Writer safe for concurrent writes, for logs written
// from several goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Count returns how often sub occurs in what was written.
func (s *SyncBuffer) Count(sub string) int {
	return strings.Count(s.String(), sub)
}

// ClusterConn starts an embedded NATS cluster and an ApConnection on it,
// both closed when the test ends.
func ClusterConn(t testing.TB, opts ...natstest.Option) (*natstest.Cluster, *apconn.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := StartCluster(t, opts...)
	conn, err := apconn.Connect(ctx, cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return cl, conn
}

// StartCluster starts an embedded NATS cluster, closed when the test ends.
func StartCluster(t testing.TB, opts ...natstest.Option) *natstest.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := natstest.Start(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// JetStream connects a plain client to url and returns a JetStream
// context on it; the connection is closed when the test ends (so call it
// once a test, not in a poll).
func JetStream(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// StartGateways starts n MxAccess gateway simulators serving data, closed
// when the test ends. A gateway a test wedged (SetCommandLatency) is
// unwedged first, so that its Close does not wait out the latency.
func StartGateways(t testing.TB, data *mxsim.Data, n int) []*mxsim.Gateway {
	t.Helper()
	gws := make([]*mxsim.Gateway, n)
	for i := range gws {
		g, err := mxsim.Start(data)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		t.Cleanup(func() { g.SetCommandLatency(0) })
		gws[i] = g
	}
	return gws
}

// StartEdge starts an edge topology of natstest (a hub cluster and a site
// leaf cluster), closed when the test ends.
func StartEdge(t testing.TB, o natstest.EdgeOptions) *natstest.Edge {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := natstest.StartEdge(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// Request sends a NATS request and fails the test when no reply comes
// within 5 s.
func Request(t testing.TB, nc *nats.Conn, subj, data string) *nats.Msg {
	t.Helper()
	m, err := nc.Request(subj, []byte(data), 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subj, err)
	}
	return m
}

// Publisher is what WaitInterest publishes its probes through: an
// ApConnection, a bridge's connection or a plain nats.Conn.
type Publisher interface {
	Publish(subj string, data []byte) error
}

// WaitInterest returns once the subscriptions nc has made so far reach the
// broker that pub publishes to. Flush proves only that nc's own broker has
// them; the other brokers learn of them over the routes, in the order they
// were made, and drop what is published to them before that. So a probe
// subscription made last, reached by a publish through pub, proves the
// others are there too.
func WaitInterest(t testing.TB, nc *nats.Conn, pub Publisher) {
	t.Helper()
	probe := nats.NewInbox()
	got := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe(probe, got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, "the subscriptions to reach the publisher's broker", 10*time.Second, func() bool {
		if err := pub.Publish(probe, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	})
}
