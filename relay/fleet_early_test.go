package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/sourcetest"
	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
)

// healthRecorder is a Handler that keeps the health reports.
type healthRecorder struct {
	sourcetest.Discard
	mu     sync.Mutex
	states []bridge.State
}

func (r *healthRecorder) HealthChanged(h bridge.Health) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, h.State)
}

// A fleet relay joins its fleet before the bridge starts its sources, so
// a lease can be won and lost before a source's Start: the loss must not
// reach a handler that is not there yet, and the Start that follows
// starts no instance and reports the source not owned.
func TestLeaseLostBeforeStart(t *testing.T) {
	cl, _ := testutil.ClusterConn(t, natstest.WithJetStream())
	h := &leaseHarness{urls: cl.URLs()}
	var starts atomic.Int32
	sim := simsource.New("early")
	defer sim.Close()
	ls := h.leased(t, "early", func() (bridge.Source, error) {
		return sourcetest.CountStarts(sim, &starts), nil
	}).(*leasedSource)
	ls.lose(fleet.CauseExpired) // before Start: no handler yet
	rec := &healthRecorder{}
	if err := ls.Start(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.states) != 1 || rec.states[0] != bridge.StateNotOwned {
		t.Errorf("health reported %v, want [%s]", rec.states, bridge.StateNotOwned)
	}
	if n := starts.Load(); n != 0 {
		t.Errorf("%d instances started for a lease lost before Start", n)
	}
}
