package fleet_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/testutil"
)

// TestReleaseHookBeforeRelease: a member with a release hook hands pairs
// over by rebalance (b joins) and by shutdown (a closes). The hook runs
// for each while a's lease is valid, and b does not win the pair during
// it, though b wins a released lease within milliseconds: the hook watches
// b for 100 ms. Positive controls: the hook saw pairs of both handovers,
// and b owns every pair at the end.
func TestReleaseHookBeforeRelease(t *testing.T) {
	cl := startJS(t)
	ps := pairs(6)
	c := cfg("a", ps)
	c.LeaseTTL = 5 * time.Second // only a handover, not expiry, moves pairs in time
	var (
		am, bm atomic.Pointer[fleet.Member]
		mu     sync.Mutex
		hooked []string
		bad    []string
	)
	note := func(list *[]string, pair string) {
		mu.Lock()
		*list = append(*list, pair)
		mu.Unlock()
	}
	hook := func(ctx context.Context, pair string) {
		a, b := am.Load(), bm.Load()
		if a == nil || b == nil {
			note(&bad, pair+" (before the members were known)")
			return
		}
		if _, ok := a.Valid(pair); !ok {
			note(&bad, pair+" (a's lease not valid in the hook)")
			return
		}
		note(&hooked, pair)
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		deadline := time.After(100 * time.Millisecond)
		for {
			if slices.Contains(b.Owned(), pair) {
				note(&bad, pair+" (b owned it during the hook)")
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-deadline:
				return
			case <-tk.C:
			}
		}
	}
	a := join(t, cl.URLs(), c, fleet.WithReleaseHook(hook))
	am.Store(a.m)
	waitOwned(t, "a to own every pair", ps, a)
	c.RelayID = "b"
	b := join(t, cl.URLs(), c)
	bm.Store(b.m)
	testutil.WaitFor(t, "a to hand b its share", 10*time.Second, func() bool {
		return len(b.m.Owned()) > 0 && len(a.m.Owned()) > 0 && len(a.m.Owned())+len(b.m.Owned()) == len(ps)
	})
	mu.Lock()
	rebalanced := len(hooked)
	mu.Unlock()
	a.close()
	waitOwned(t, "b to own every pair", ps, b)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("hooked %d pairs (%d at the rebalance), bad %v", len(hooked), rebalanced, bad)
	if len(bad) > 0 {
		t.Fatalf("the release hook did not run before the release: %v", bad)
	}
	if rebalanced == 0 || len(hooked) != len(ps) {
		t.Fatalf("hooked %d pairs, %d at the rebalance; want every pair of a, some at the rebalance", len(hooked), rebalanced)
	}
}
