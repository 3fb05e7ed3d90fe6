package bridge_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// meterSource is a Source written outside the bridge package: everything
// it needs is exported. It reports one fixed reading per subscribed tag.
type meterSource struct {
	mu sync.Mutex
	h  bridge.Handler
}

func (s *meterSource) Name() string { return "meters" }

func (s *meterSource) Start(_ context.Context, h bridge.Handler) error {
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
	h.HealthChanged(bridge.Health{State: bridge.StateConnected, Endpoint: "memory", Level: -1})
	return nil
}

func (s *meterSource) Subscribe(_ context.Context, tags []bridge.Tag) ([]error, error) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	now := time.Now()
	for _, t := range tags {
		h.Update(t.Handle, wire.Update{Value: 42.5, Status: wire.StatusGood, SourceTime: now, ServerTime: now})
	}
	return make([]error, len(tags)), nil
}

func (s *meterSource) Unsubscribe(context.Context, []bridge.Tag) error { return nil }

func (s *meterSource) Write(context.Context, bridge.Tag, any) (wire.StatusCode, error) {
	return 0, bridge.ErrReadOnly
}

func (s *meterSource) Health() bridge.Health {
	return bridge.Health{State: bridge.StateConnected, Endpoint: "memory", Level: -1}
}

func (s *meterSource) Close() error { return nil }

// A bridge relays the tags of any Source onto NATS. Here the source is a
// few lines of the user's own and the cluster is embedded; package
// opcuasource has the OPC UA source.
func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster, err := natstest.Start(ctx, natstest.WithNodes(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	conn, err := apconn.Connect(ctx, cluster.URLs())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	b, err := bridge.New(conn, bridge.Config{Subject: "site.{source}.{tag}"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	if err := b.AddSource(&meterSource{}, []bridge.TagConfig{{Name: "Flow", Address: "m1"}}); err != nil {
		fmt.Println(err)
		return
	}
	updates := make(chan *nats.Msg, 4)
	if _, err := conn.ChanSubscribe("site.meters.Flow", updates); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	m := <-updates
	u, err := wire.DecodeJSON(m.Data)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s on %s: %v %s seq %d\n", u.Tag, m.Subject, u.Value, u.Status.Quality(), u.Seq)
	// Output:
	// Flow on site.meters.Flow: 42.5 Good seq 1
}
