package ldm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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

// TestExecutorConcurrentSubmitAndClose races Submit from several goroutines
// against Close and checks what Submit and Close promise:
//   - a task runs at most once, and only if its Submit returned true;
//   - tasks run one at a time;
//   - an accepted task is never lost: it runs, or Close drops it while it is
//     still queued, and the queue is FIFO, so once a submitter's accepted task
//     did not run, none it submitted later may have run either;
//   - before Close begins, false from Submit only means "coalesced into a
//     queued task with the same key";
//   - when Close returns no task is running, none starts afterwards, and
//     every later Submit returns false.
func TestExecutorConcurrentSubmitAndClose(t *testing.T) {
	const (
		submitters = 4
		warmRuns   = 50 // tasks that must have run before Close is called
		lateSubmit = 10 // submissions per submitter after Close returned
	)
	e := NewExecutor()

	var (
		closing  atomic.Bool // set just before Close is called
		closed   atomic.Bool // set just after Close returned
		running  atomic.Int32
		ranTotal atomic.Int32
		warm     = make(chan struct{})
	)
	// record holds one submitter's history. The task for submission i
	// writes runs[i] from the executor's goroutine, hence the mutex.
	type record struct {
		mu       sync.Mutex
		accepted []bool      // Submit returned true
		runs     []int       // times the task ran
		last     map[int]int // key -> index of its last accepted submission
	}
	records := make([]*record, submitters)

	task := func(r *record, i int) func(context.Context) {
		return func(context.Context) {
			if n := running.Add(1); n != 1 {
				t.Errorf("%d tasks running at once, want 1", n)
			}
			if closed.Load() {
				t.Error("a task started after Close returned")
			}
			r.mu.Lock()
			r.runs[i]++
			r.mu.Unlock()
			if ranTotal.Add(1) == warmRuns {
				close(warm)
			}
			running.Add(-1)
		}
	}

	var wg sync.WaitGroup
	for g := range submitters {
		r := &record{last: make(map[int]int)}
		records[g] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := 0
			for i := 0; after < lateSubmit; i++ {
				// Few keys per submitter, so that Submit also coalesces.
				key := g*1000 + i%3
				wasClosed := closed.Load()
				r.mu.Lock()
				r.accepted = append(r.accepted, false)
				r.runs = append(r.runs, 0)
				prev, hasPrev := r.last[key]
				waiting := hasPrev && r.runs[prev] == 0
				r.mu.Unlock()

				ok := e.Submit(key, task(r, i))
				// Read after Submit: a false that comes back while closing
				// is still unset was returned before Close began.
				closeBegun := closing.Load()

				r.mu.Lock()
				r.accepted[i] = ok
				if ok {
					r.last[key] = i
				}
				r.mu.Unlock()
				switch {
				case ok && wasClosed:
					t.Errorf("submitter %d: Submit %d after Close returned queued a task", g, i)
					return
				case !ok && !closeBegun && !waiting:
					t.Errorf("submitter %d: Submit %d returned false before Close with no task of key %d waiting", g, i, key)
					return
				}
				if wasClosed {
					after++
				}
			}
		}()
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-warm:
		case <-time.After(10 * time.Second):
			t.Errorf("only %d tasks ran in 10s", ranTotal.Load())
		}
		// Make sure a task is running when Close is called: it holds on
		// until Close cancels its context, then a little longer, so that a
		// Close that does not wait for it returns while it still runs.
		blocking, closeReturned := make(chan struct{}), make(chan struct{})
		if !e.Submit("blocker", func(ctx context.Context) {
			running.Add(1)
			defer running.Add(-1)
			close(blocking)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Error("Close did not cancel the running task's context")
			}
			select {
			case <-closeReturned:
			case <-time.After(20 * time.Millisecond):
			}
		}) {
			t.Error("Submit of the blocker returned false")
		}
		select {
		case <-blocking:
		case <-time.After(10 * time.Second):
			t.Error("the blocker did not start in 10s")
		}
		closing.Store(true)
		e.Close()
		if n := running.Load(); n != 0 {
			t.Errorf("Close returned while %d task(s) were running", n)
		}
		closed.Store(true)
		close(closeReturned)
	}()
	wg.Wait()
	e.Close() // idempotent, and a no-op for the checks below

	if n := e.Pending(); n != 0 {
		t.Errorf("Pending after Close = %d, want 0", n)
	}
	for g, r := range records {
		if err := checkRecord(r.accepted, r.runs); err != nil {
			t.Errorf("submitter %d: %v", g, err)
		}
	}
}

// checkRecord checks one submitter's history after Close: accepted[i] is
// what its i-th Submit returned, runs[i] how often that task ran. It returns
// the first breach, so that a broken Executor yields one line per submitter.
func checkRecord(accepted []bool, runs []int) error {
	firstDropped := -1
	for i, ok := range accepted {
		switch n := runs[i]; {
		case n > 1:
			return fmt.Errorf("task %d ran %d times", i, n)
		case n == 1 && !ok:
			return fmt.Errorf("task %d ran although Submit returned false", i)
		case ok && n == 0 && firstDropped < 0:
			firstDropped = i
		case ok && n == 1 && firstDropped >= 0:
			// The queue is FIFO and Close drops all of it at once.
			return fmt.Errorf("accepted task %d never ran, but the later task %d did: it was lost, not dropped by Close", firstDropped, i)
		}
	}
	return nil
}
