package ldm

import (
	"context"
	"sync"
)

// Executor runs tasks one at a time on a goroutine of its own, so that
// nats.go handlers can hand over work without blocking the connection's
// callback goroutine.
//
// Tasks are keyed. A task submitted while another with the same key is
// still queued (not yet started) is dropped: a burst of identical requests,
// such as an LDM notice and a disconnect that both ask for "promote the
// passive", runs once. A task whose key is already running is queued again,
// because the running one may have looked at the state before the new
// request was made.
//
// The zero value is not usable; create one with NewExecutor.
type Executor struct {
	mu      sync.Mutex
	queue   []task
	queued  map[any]struct{}
	closed  bool
	wake    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	stopped chan struct{}
}

type task struct {
	key any
	fn  func(context.Context)
}

// NewExecutor starts an Executor. Stop it with Close.
func NewExecutor() *Executor {
	ctx, cancel := context.WithCancel(context.Background())
	e := &Executor{
		queued:  make(map[any]struct{}),
		wake:    make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
		stopped: make(chan struct{}),
	}
	go e.run()
	return e
}

// Submit queues fn under key and returns at once. It reports whether a new
// task was queued: false means a task with the same key was already waiting
// (the request is coalesced into it) or the Executor is closed.
//
// fn receives a context that is cancelled when Close is called; a long task
// should watch it.
func (e *Executor) Submit(key any, fn func(ctx context.Context)) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	if _, dup := e.queued[key]; dup {
		return false
	}
	e.queued[key] = struct{}{}
	e.queue = append(e.queue, task{key: key, fn: fn})
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return true
}

// Pending returns the number of queued tasks that have not started.
func (e *Executor) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue)
}

// Close cancels the context of the running task, drops the queued ones and
// waits for the worker goroutine to return. It is safe to call more than
// once and from several goroutines, but not from inside a task (it would
// wait for itself).
func (e *Executor) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		e.queue = nil
		clear(e.queued)
		e.cancel()
		close(e.wake)
	}
	e.mu.Unlock()
	<-e.stopped
}

// Done is closed when the worker goroutine has returned after Close.
func (e *Executor) Done() <-chan struct{} { return e.stopped }

func (e *Executor) run() {
	defer close(e.stopped)
	for range e.wake {
		for {
			e.mu.Lock()
			if e.closed || len(e.queue) == 0 {
				e.mu.Unlock()
				break
			}
			t := e.queue[0]
			e.queue[0] = task{}
			e.queue = e.queue[1:]
			delete(e.queued, t.key)
			e.mu.Unlock()
			t.fn(e.ctx)
		}
	}
}
