package ldm

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExecutorRunsInOrder(t *testing.T) {
	e := NewExecutor()
	defer e.Close()
	var mu sync.Mutex
	var got []int
	done := make(chan struct{})
	for i := range 10 {
		e.Submit(i, func(context.Context) {
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
			if i == 9 {
				close(done)
			}
		})
	}
	<-done
	for i, v := range got {
		if v != i {
			t.Fatalf("order = %v", got)
		}
	}
}

func TestExecutorCoalescesQueuedDuplicates(t *testing.T) {
	e := NewExecutor()
	defer e.Close()
	release := make(chan struct{})
	started := make(chan struct{})
	e.Submit("block", func(context.Context) { close(started); <-release })
	<-started

	runs := 0
	ran := make(chan struct{}, 10)
	queued := 0
	for range 5 {
		if e.Submit("promote", func(context.Context) { runs++; ran <- struct{}{} }) {
			queued++
		}
	}
	if queued != 1 {
		t.Fatalf("queued %d tasks for one key, want 1", queued)
	}
	// Positive control: a different key is not coalesced.
	if !e.Submit("rehome", func(context.Context) { ran <- struct{}{} }) {
		t.Fatal("a task with another key was coalesced")
	}
	if n := e.Pending(); n != 2 {
		t.Fatalf("Pending = %d, want 2", n)
	}
	close(release)
	<-ran
	<-ran
	if runs != 1 {
		t.Fatalf("promote ran %d times, want 1", runs)
	}
}

func TestExecutorRequeuesWhileRunning(t *testing.T) {
	e := NewExecutor()
	defer e.Close()
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	count := 0
	fn := func(context.Context) {
		count++
		started <- struct{}{}
		if count == 1 {
			<-release
		}
	}
	e.Submit("k", fn)
	<-started
	// The running task may have read stale state: the same key is queued again.
	if !e.Submit("k", fn) {
		t.Fatal("a key that is running, not queued, was coalesced")
	}
	close(release)
	<-started
}

func TestExecutorCloseCancelsAndWaits(t *testing.T) {
	e := NewExecutor()
	started := make(chan struct{})
	finished := make(chan struct{})
	e.Submit("long", func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(finished)
	})
	e.Submit("never", func(context.Context) { t.Error("a queued task ran after Close") })
	<-started
	e.Close()
	select {
	case <-finished:
	default:
		t.Fatal("Close returned before the running task finished")
	}
	e.Close() // idempotent
	if e.Submit("late", func(context.Context) {}) {
		t.Fatal("Submit after Close queued a task")
	}
	select {
	case <-e.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed")
	}
}

func TestExecutorConcurrentSubmitAndClose(t *testing.T) {
	e := NewExecutor()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				e.Submit(g*1000+i%3, func(context.Context) {})
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); e.Close() }()
	wg.Wait()
	e.Close()
}
