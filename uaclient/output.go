package uaclient

import (
	"context"
	"sync"
)

// output delivers updates and events to the user's handlers, in order, on
// one goroutine, so that a slow handler never stalls the supervisor. The
// supervisor appends without blocking; publishers wait for room before
// they ask the server for more (waitRoom), which bounds the backlog
// without blocking anyone who makes decisions.
type output struct {
	onData  func(Update)
	onEvent func(Event)
	limit   int

	mu     sync.Mutex
	q      []outItem
	wake   chan struct{} // capacity 1: something was appended
	room   chan struct{} // closed and replaced each time the delivery goroutine takes the backlog
	closed bool
	done   chan struct{} // closed when the delivery goroutine has returned
}

type outItem struct {
	u  Update
	ev *Event
	fn func() // run by the delivery goroutine once everything before it is delivered
}

func newOutput(onData func(Update), onEvent func(Event), limit int) *output {
	o := &output{onData: onData, onEvent: onEvent, limit: limit,
		wake: make(chan struct{}, 1), room: make(chan struct{}), done: make(chan struct{})}
	go o.run()
	return o
}

func (o *output) push(it outItem) {
	if it.fn == nil && (it.ev == nil && o.onData == nil || it.ev != nil && o.onEvent == nil) {
		return
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.q = append(o.q, it)
	select {
	case o.wake <- struct{}{}:
	default:
	}
	o.mu.Unlock()
}

func (o *output) data(u Update) { o.push(outItem{u: u}) }

func (o *output) event(e Event) { o.push(outItem{ev: &e}) }

// after runs f on the delivery goroutine once everything queued before it
// has been delivered.
func (o *output) after(f func()) { o.push(outItem{fn: f}) }

// full reports whether the backlog is over the limit: publishers are
// holding back, so a session's silence is the Pair's own doing.
func (o *output) full() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.closed && len(o.q) > o.limit
}

// waitRoom waits while the backlog is over the limit.
func (o *output) waitRoom(ctx context.Context) error {
	for {
		o.mu.Lock()
		if o.closed || len(o.q) <= o.limit {
			o.mu.Unlock()
			return nil
		}
		room := o.room
		o.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (o *output) run() {
	defer close(o.done)
	var batch []outItem
	for range o.wake {
		for {
			o.mu.Lock()
			if o.closed {
				o.mu.Unlock()
				return
			}
			batch, o.q = o.q, batch[:0]
			close(o.room)
			o.room = make(chan struct{})
			o.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for i := range batch {
				if o.stopped() {
					return
				}
				switch it := &batch[i]; {
				case it.fn != nil:
					it.fn()
				case it.ev != nil:
					o.onEvent(*it.ev)
				default:
					o.onData(it.u)
				}
				batch[i] = outItem{}
			}
		}
	}
}

func (o *output) stopped() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// close stops delivery after the handler call in progress, drops what is
// still queued and waits for the delivery goroutine.
func (o *output) close() {
	o.mu.Lock()
	if !o.closed {
		o.closed = true
		o.q = nil
		close(o.room)
		close(o.wake)
	}
	o.mu.Unlock()
	<-o.done
}
