package relay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/sourcetest"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
)

// A fleet relay's leased source passes the source conformance suite: the
// wrapper keeps the contract of what it wraps, forwards its optional
// interfaces, and starts the instance whose lease was won before the
// bridge started the wrapper (the fleet joins as the sources start).
func TestLeasedSourceConformance(t *testing.T) {
	cl, conn := testutil.ClusterConn(t, natstest.WithJetStream())
	h := &leaseHarness{urls: cl.URLs()}
	sourcetest.Run(t, sourcetest.Harness{Conn: conn, Servers: h.servers, Wrap: h.wrap})
}

type leaseHarness struct {
	urls    []string
	buckets atomic.Uint64
}

// leased returns a leased source named name of a one-relay fleet of its
// own, joined at once: the relay wins the lease before the bridge starts
// the source.
func (h *leaseHarness) leased(t *testing.T, name string, build SourceFactory) bridge.Source {
	first, err := build()
	if err != nil {
		t.Fatal(err)
	}
	f := newFleetPart(&FleetConfig{RelayID: "r1", Bucket: fmt.Sprintf("conf%d", h.buckets.Add(1)), LeaseTTL: time.Second},
		testutil.Logger(t))
	ls := f.lease(name, first, build)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.connect(h.urls, "conformance-"+name, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.join(ctx); err != nil {
		f.closeConn()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f.leave(ctx)
	})
	testutil.WaitFor(t, "the lease won", 10*time.Second, func() bool {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		return ls.owned
	})
	return ls
}

func (h *leaseHarness) wrap(t *testing.T, name string, newInner func() bridge.Source) bridge.Source {
	return h.leased(t, name, func() (bridge.Source, error) { return newInner(), nil })
}

func (h *leaseHarness) servers(t *testing.T, up bool) sourcetest.Servers {
	return &leasedSims{h: h, up: up}
}

// leasedSims is a simulated server whose sources are leased: each instance
// a lease builds is a sim source, down until Up when the server is.
type leasedSims struct {
	h  *leaseHarness
	mu sync.Mutex
	up bool
	// built are the instances made so far, brought up by Up.
	built []*simsource.Source
}

func (s *leasedSims) NewSource(t *testing.T, name string) bridge.Source {
	return s.h.leased(t, name, func() (bridge.Source, error) {
		src := simsource.New(name)
		s.mu.Lock()
		if !s.up {
			src.Down()
		}
		s.built = append(s.built, src)
		s.mu.Unlock()
		src.Run(50 * time.Millisecond)
		t.Cleanup(func() { src.Close() })
		return src, nil
	})
}

func (s *leasedSims) Tags() []bridge.TagConfig {
	return []bridge.TagConfig{{Name: "t1", Address: "sim:1"}, {Name: "t2", Address: "sim:2"}}
}

func (s *leasedSims) Up(*testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up = true
	for _, src := range s.built {
		src.Up()
	}
}

// stuckSource is a source whose Start waits until its context ends, as a
// source that waits for servers that are down would.
type stuckSource struct {
	bridge.Source
	entered chan struct{}
}

func (s *stuckSource) Name() string { return "stuck" }

func (s *stuckSource) Start(ctx context.Context, _ bridge.Handler) error {
	close(s.entered)
	<-ctx.Done()
	return ctx.Err()
}

func (s *stuckSource) Close() error { return nil }

// A leased source closed while its instance is still starting ends that
// Start and returns: a fleet relay whose sources cannot connect stops on
// SIGTERM.
func TestLeasedSourceCloseEndsAStartingInstance(t *testing.T) {
	cl, _ := testutil.ClusterConn(t, natstest.WithJetStream())
	h := &leaseHarness{urls: cl.URLs()}
	inner := &stuckSource{entered: make(chan struct{})}
	ls := h.leased(t, "stuck", func() (bridge.Source, error) { return inner, nil })
	if err := ls.Start(context.Background(), sourcetest.Discard{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inner.entered: // the control: the instance is starting
	case <-time.After(10 * time.Second):
		t.Fatal("the won lease started no instance")
	}
	done := make(chan error, 1)
	go func() { done <- ls.Close() }()
	select {
	case <-done:
	case <-time.After(sourcetest.Patience):
		t.Fatalf("Close did not return in %v while the instance was starting", sourcetest.Patience)
	}
}
