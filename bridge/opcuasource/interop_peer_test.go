package opcuasource_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/nodeopcua"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/uaclient"
)

// TestPairLatePeerInterop plays the late peer on two node-opcua servers:
// the active drops to 0 while its partner still reports 90, then the
// partner rises to 250. The stay at the 0 is the positive control that the
// trigger fired and found the partner wanting; the rise moves the data at
// once (cause "standby became Healthy"), not one degraded window later.
func TestPairLatePeerInterop(t *testing.T) {
	a := nodeopcua.StartT(t, nodeopcua.Config{ServiceLevel: 250, CounterMs: 100})
	b := nodeopcua.StartT(t, nodeopcua.Config{ServiceLevel: 90, CounterMs: 100})
	var mu sync.Mutex
	var events []uaclient.Event
	p, err := uaclient.NewPair(uaclient.PairConfig{Endpoints: []string{a.Endpoint, b.Endpoint}},
		uaclient.WithLogger(testutil.Logger(t)),
		uaclient.WithEventHandler(func(e uaclient.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	startOnCounter(t, p)
	find := func(k uaclient.EventKind) (uaclient.Event, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e.Kind == k {
				return e, true
			}
		}
		return uaclient.Event{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.SetLevel(ctx, 0); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the 0 finds the partner wanting", 10*time.Second, func() bool { _, ok := find(uaclient.EventStay); return ok })
	if stay, _ := find(uaclient.EventStay); stay.Cause != servicelevel.CausePeerNotHealthy {
		t.Fatalf("stay: %+v", stay)
	}
	if fo, ok := find(uaclient.EventFailover); ok {
		t.Fatalf("switched to a partner at 90: %s", fo.Message)
	}
	rose := time.Now()
	if err := b.SetLevel(ctx, 250); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the failover at the rise", 10*time.Second, func() bool { _, ok := find(uaclient.EventFailover); return ok })
	fo, _ := find(uaclient.EventFailover)
	if fo.Cause != servicelevel.CauseStandbyHealthy || fo.Target != servicelevel.Backup {
		t.Fatalf("failover: %+v", fo)
	}
	t.Logf("rise -> failover: %v (%s)", fo.At.Sub(rose), fo.Message)
}
