package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// The helpers the package's tests share, one copy each.

// TestMain fails the run if any goroutine outlives the tests: the servers,
// proxies and clients started here must all be stopped by Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startCluster starts a NATS cluster that the test's cleanup closes.
func startCluster(t *testing.T, opts ...Option) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Start(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// connect connects a client to url with the cluster's client options; the
// test's cleanup closes it.
func connect(t *testing.T, c *Cluster, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append(c.ClientOptions(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
