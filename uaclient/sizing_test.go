package uaclient

import (
	"strings"
	"testing"
	"time"
)

func TestQueueSizeFor(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name                         string
		sampling, publishing, window time.Duration
		want                         uint32
	}{
		{"defaults: 10 s at 100 ms", ms(100), ms(100), 10 * time.Second, 102},
		{"no window: the jitter still needs two", ms(100), ms(100), 0, MinDerivedQueueSize},
		{"fleet default: 4 s at 100 ms", ms(100), ms(100), 4 * time.Second, 42},
		{"sampling faster than publishing", ms(10), ms(100), 10 * time.Second, 1011},
		{"sampling slower than publishing", ms(1000), ms(100), 10 * time.Second, 12},
		{"a window not a whole number of samples rounds up", ms(300), ms(100), 1000 * time.Millisecond, 6},
		{"sampling 0 counts as the publishing interval", 0, ms(250), 10 * time.Second, 42},
		{"capped at the largest queue", ms(1), ms(1), time.Hour, MaxQueueSize},
		{"a window of a whole slow sample", ms(5000), ms(100), 10 * time.Second, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := QueueSizeFor(tc.sampling, tc.publishing, tc.window)
			if got != tc.want {
				t.Fatalf("QueueSizeFor(%v, %v, %v) = %d, want %d", tc.sampling, tc.publishing, tc.window, got, tc.want)
			}
			// The size covers the window, and one less does not (unless
			// it is the floor or the cap).
			if got > MinDerivedQueueSize && got < MaxQueueSize {
				if c := Covers(got, tc.sampling, tc.publishing); c < tc.window {
					t.Fatalf("Covers(%d) = %v, below the window %v", got, c, tc.window)
				}
				if c := Covers(got-1, tc.sampling, tc.publishing); c >= tc.window {
					t.Fatalf("Covers(%d) = %v, one less already covers %v", got-1, c, tc.window)
				}
			}
		})
	}
}

// TestDefaultsCoverTakeover: with nothing set, an item's queue, the data
// subscription's lifetime and the session timeout cover the default
// takeover window, and the queue is above 1 (a cycle that finds two
// samples keeps both).
func TestDefaultsCoverTakeover(t *testing.T) {
	set, err := PairConfig{Endpoints: []string{"opc.tcp://127.0.0.1:4840"}}.Settings()
	if err != nil {
		t.Fatal(err)
	}
	window := time.Duration(DefaultTakeoverWindowMilliseconds) * time.Millisecond
	if set.TakeoverWindow != window {
		t.Fatalf("takeover window %v, want %v", set.TakeoverWindow, window)
	}
	spec, err := specOf(Item{Handle: 1, NodeID: "ns=2;s=x"}, &set)
	if err != nil {
		t.Fatal(err)
	}
	if spec.queue < 2 || Covers(spec.queue, spec.sampling, set.PublishingInterval) < window {
		t.Fatalf("default queue %d covers %v at %v, want at least %v", spec.queue,
			Covers(spec.queue, spec.sampling, set.PublishingInterval), spec.sampling, window)
	}
	if !spec.discardOldest {
		t.Fatal("discardOldest is false by default")
	}
	// An item sampled faster gets a larger queue of its own.
	fast, _ := specOf(Item{Handle: 2, NodeID: "ns=2;s=y", SamplingInterval: 10 * time.Millisecond}, &set)
	if Covers(fast.queue, fast.sampling, set.PublishingInterval) < window {
		t.Fatalf("a 10 ms item's default queue %d does not cover %v", fast.queue, window)
	}
	// A configured queue is kept as given.
	own, _ := specOf(Item{Handle: 3, NodeID: "ns=2;s=z", QueueSize: 5}, &set)
	if own.queue != 5 {
		t.Fatalf("configured queue %d, want 5", own.queue)
	}
	if l := set.SubscriptionLifetime(); l < window {
		t.Fatalf("subscription lifetime %v below the window %v", l, window)
	}
	if st := set.SessionTimeout(); st < window {
		t.Fatalf("session timeout %v below the window %v", st, window)
	}
	// A longer window (a fleet with a long lease) lengthens the lifetime.
	long := 90000
	set2, err := PairConfig{Endpoints: []string{"opc.tcp://127.0.0.1:4840"}, TakeoverWindowMilliseconds: &long}.Settings()
	if err != nil {
		t.Fatal(err)
	}
	if l := set2.SubscriptionLifetime(); l < 90*time.Second {
		t.Fatalf("subscription lifetime %v below a 90 s window", l)
	}
}

func TestTakeoverWindowRange(t *testing.T) {
	bad := -1
	err := PairConfig{Endpoints: []string{"opc.tcp://127.0.0.1:4840"}, TakeoverWindowMilliseconds: &bad}.Validate()
	if err == nil || !strings.Contains(err.Error(), "takeoverWindowMilliseconds") {
		t.Fatalf("err %v, want one naming takeoverWindowMilliseconds", err)
	}
}
