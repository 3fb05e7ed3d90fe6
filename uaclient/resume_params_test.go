package uaclient

import (
	"testing"
	"time"
)

// The session timeout and the subscriptions' lifetimes cover the blip
// tolerance and the margin, and what the server grants decides the
// recoverable blip.
func TestLinkParametersCoverTheBlipTolerance(t *testing.T) {
	for _, tc := range []struct {
		tolerance, session time.Duration
		lifetime           uint32 // of a 100 ms subscription with keep-alive 50
	}{
		{0, 30 * time.Second, 600},
		{30 * time.Second, 40 * time.Second, 600},
		{120 * time.Second, 130 * time.Second, 1300},
	} {
		set := PairSettings{BlipTolerance: tc.tolerance}
		if got := set.sessionTimeout(); got != tc.session {
			t.Errorf("tolerance %v: session timeout %v, want %v", tc.tolerance, got, tc.session)
		}
		if got := lifetimeCount(100*time.Millisecond, 50, set.sessionTimeout()); got != tc.lifetime {
			t.Errorf("tolerance %v: lifetime count %d, want %d", tc.tolerance, got, tc.lifetime)
		}
	}
	// A server that grants less shortens the recoverable blip.
	lp := LinkParams{SessionTimeout: 40 * time.Second,
		Health: SubscriptionParams{Interval: 100 * time.Millisecond, LifetimeCount: 600},
		Data:   SubscriptionParams{Interval: 100 * time.Millisecond, LifetimeCount: 200}}
	lp.settle()
	if lp.Recoverable != 10*time.Second {
		t.Fatalf("recoverable %v, want 10s (a 20 s data lifetime less the 10 s margin)", lp.Recoverable)
	}
	lp.Data.LifetimeCount = 50
	lp.settle()
	if lp.Recoverable != 0 {
		t.Fatalf("recoverable %v, want 0", lp.Recoverable)
	}
}
