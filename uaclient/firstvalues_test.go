package uaclient

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
)

func note(h uint32, v int32) dataNote {
	return dataNote{handle: h, dv: &ua.DataValue{Value: ua.MustVariant(v)}}
}

func TestFirstValuesKeepsEachItemsFirstSample(t *testing.T) {
	var f firstValues
	f.add([]dataNote{note(1, 10)}) // not collecting: dropped
	f.start()
	f.add([]dataNote{note(2, 20), note(2, 21), note(3, 30)})
	f.add([]dataNote{note(2, 22)})
	sent := make(chan struct{})
	close(sent)
	got := f.await(context.Background(), []uint32{1, 2, 3}, sent, time.Millisecond)
	if _, ok := got[1]; ok {
		t.Errorf("kept a sample from before start: %v", got[1])
	}
	if v := got[2].Value.Value(); v != int32(20) {
		t.Errorf("item 2: %v, want its first sample 20", v)
	}
	if v := got[3].Value.Value(); v != int32(30) {
		t.Errorf("item 3: %v, want 30", v)
	}
	f.stop()
	if got := f.await(context.Background(), []uint32{2}, sent, time.Hour); len(got) != 0 {
		t.Errorf("after stop: %v, want nothing", got)
	}
}

// The wait for missing samples starts once every request is answered, and
// each new item's sample starts it again; a sample of an item already seen
// does not.
func TestFirstValuesWaitStartsAfterTheRequestsAndOnProgress(t *testing.T) {
	var f firstValues
	f.start()
	sent := make(chan struct{})
	done := make(chan map[uint32]*ua.DataValue)
	const wait = 50 * time.Millisecond
	go func() { done <- f.await(context.Background(), []uint32{1, 2, 3}, sent, wait) }()

	// Long past the wait, but the requests are not all answered yet.
	select {
	case got := <-done:
		t.Fatalf("returned %v before the requests were answered", got)
	case <-time.After(4 * wait):
	}
	f.add([]dataNote{note(1, 10)})
	close(sent)
	// Samples of new items keep it waiting; then item 3 completes it.
	for range 3 {
		f.add([]dataNote{note(1, 11)}) // no progress
		f.add([]dataNote{note(2, 20)})
	}
	f.add([]dataNote{note(3, 30)})
	got := <-done
	if len(got) != 3 {
		t.Fatalf("got %d values, want 3", len(got))
	}

	// Positive control: with item 3 silent, it gives up after the wait.
	f.start()
	close2 := make(chan struct{})
	close(close2)
	f.add([]dataNote{note(1, 10), note(2, 20)})
	start := time.Now()
	got = f.await(context.Background(), []uint32{1, 2, 3}, close2, wait)
	if len(got) != 2 || got[3] != nil {
		t.Fatalf("got %v, want items 1 and 2 only", got)
	}
	if took := time.Since(start); took < wait {
		t.Fatalf("gave up after %v, before the wait of %v", took, wait)
	}
}

func TestFirstValuesAwaitEndsWithTheContext(t *testing.T) {
	var f firstValues
	f.start()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := f.await(ctx, []uint32{1}, make(chan struct{}), time.Hour); len(got) != 0 {
		t.Fatalf("got %v, want nothing", got)
	}
}

func TestBatchCountMatchesInBatches(t *testing.T) {
	for _, tc := range []struct{ n, first, size int }{
		{0, 50, 500}, {1, 50, 500}, {50, 50, 500}, {51, 50, 500}, {550, 50, 500}, {551, 50, 500},
		{10002, 50, 500}, {1000, 500, 500}, {1001, 500, 500}, {3, 1, 1},
	} {
		var calls int
		var mu sync.Mutex
		inBatches(tc.n, tc.first, tc.size, func(start, end int, _ *batchSlot) error {
			mu.Lock()
			calls++
			mu.Unlock()
			return nil
		})
		if got := batchCount(tc.n, tc.first, tc.size); got != calls {
			t.Errorf("batchCount(%d, %d, %d) = %d, inBatches made %d", tc.n, tc.first, tc.size, got, calls)
		}
	}
}
