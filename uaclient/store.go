package uaclient

import (
	"context"
	"sync"
)

// Acknowledge after store. A server keeps each data NotificationMessage
// until the client acknowledges its sequence number (Part 4, 5.13.1), and
// a subscription outlives its session for its lifetime: so a message the
// client has not acknowledged is still the server's when the client dies,
// for a successor that takes the subscription over to ask for again
// (Republish). With WithAckAfterStore the Pair acknowledges a data
// message only once every update it carried is stored by whoever the data
// handler hands it to, not when the loop hands it on: what the relay
// holds unstored, the server holds too.
//
// The loop queues a mark on the output behind the updates of the messages
// it handed on (markStored and onStored, beside the rest of the data path
// in datapath.go); the output goroutine passes the mark to the user's hook,
// which calls done once everything it was handed before is stored; done
// posts evStored, and the loop queues the acknowledgements on the session
// that holds the subscription now (the same subscription after a link blip
// was ridden out; after a new subscription the old numbers mean nothing
// and are dropped). The messages handed on and not yet stored are
// bounded (storeGate): at the bound the publishers send no Publish
// request until some are stored, so the server keeps the rest, never the
// Pair.

// evStored reports that everything sb handed on before number to is
// stored.
type evStored struct {
	sb *subscription
	to uint32
}

// storeGate bounds the data messages handed on and not yet stored. The
// zero value (no limit) never holds anyone back.
type storeGate struct {
	limit int

	mu   sync.Mutex
	n    int
	room chan struct{} // closed and replaced when n falls to the limit
}

func newStoreGate(limit int) *storeGate {
	return &storeGate{limit: limit, room: make(chan struct{})}
}

func (g *storeGate) add(n int) {
	g.mu.Lock()
	g.n += n
	g.mu.Unlock()
}

func (g *storeGate) done(n int) {
	g.mu.Lock()
	was := g.n
	g.n -= n
	if was > g.limit && g.n <= g.limit {
		close(g.room)
		g.room = make(chan struct{})
	}
	g.mu.Unlock()
}

// full reports whether more are unstored than the limit allows: the
// publishers hold back, so the subscriptions' silence is the Pair's own.
func (g *storeGate) full() bool {
	if g == nil || g.limit == 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n > g.limit
}

// waitRoom waits while more are unstored than the limit allows.
func (g *storeGate) waitRoom(ctx context.Context) error {
	if g == nil || g.limit == 0 {
		return nil
	}
	for {
		g.mu.Lock()
		if g.n <= g.limit {
			g.mu.Unlock()
			return nil
		}
		room := g.room
		g.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
