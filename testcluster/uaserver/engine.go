package uaserver

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopcua/opcua/ua"
)

// Subscription limits. Requests beyond them get per-operation Bad results
// or revised parameters, never a panic.
const (
	maxSubsPerSession      = 64
	maxItemsPerSub         = 50000
	maxQueueSize           = 256
	maxPublishQueue        = 64
	maxResponsesPerCycle   = 16
	maxPublishingInterval  = 10 * time.Minute
	maxKeepAlivePeriod     = 5 * time.Minute
	maxSubscriptionLife    = time.Hour
	defaultKeepAliveCount  = 10
	publishEnvelopeReserve = 256
	defaultRetransmitQueue = 1000
)

// uaEngine holds a server's sessions, subscriptions and monitored items.
//
// It replaces gopcua's SubscriptionService and MonitoredItemService, whose
// traps it avoids by construction:
//   - Notifications are queued under mu and never sent under it: each
//     subscription's goroutine takes what is due under the lock and writes
//     to the network after releasing it, so a producer never blocks on a
//     subscription that has died or stalled (gopcua's ChangeNotification
//     blocks on a full channel while holding the monitored-item mutex).
//   - Each monitored item has a queue of the size the client asked for (up
//     to maxQueueSize), not a fixed size of 1.
//   - Subscription and item ids come from counters that never repeat
//     (gopcua derives them from the map size, so they collide after a
//     delete).
//   - Publishing intervals of 0, negative or NaN are revised to the
//     minimum (gopcua passed 0 to time.NewTicker and panicked).
//   - Unknown subscriptions, items and sessions get Bad results (gopcua
//     dereferenced nil items in SetMonitoringMode and DeleteMonitoredItems).
//   - A data change that does not fit one 64 KiB chunk is split over
//     several PublishResponses with MoreNotifications set.
//   - ModifySubscription, SetPublishingMode, SetMonitoringMode (Sampling
//     queues without reporting), ModifyMonitoredItems and
//     TransferSubscriptions (with the status change to the old session)
//     are implemented.
//   - Each subscription keeps the data messages it sent until the client
//     acknowledges them (WithRetransmitQueue), lists them in every
//     PublishResponse and TransferResult (AvailableSequenceNumbers) and
//     sends them again on Republish; acknowledging one it does not hold
//     gets Bad_SequenceNumberUnknown. With a session activated on a new
//     channel after its old one broke, a client recovers what was sent
//     into the broken channel.
//
// Sessions are in opcua_sessions.go, the subscription services in
// opcua_subs.go, the publishing loop in opcua_publish.go, and monitored
// items and sampling in opcua_items.go.
type uaEngine struct {
	s *Server

	mu       sync.Mutex
	closed   bool
	sessions map[string]*uaSession
	subs     map[uint32]*uaSub
	byNode   map[*uaNode]map[*uaItem]struct{}
	nextSub  uint32
	nextItem uint32

	wg sync.WaitGroup // subscription goroutines

	notifications atomic.Uint64
	itemsCreated  atomic.Uint64
	nodesRead     atomic.Uint64
	nodesWritten  atomic.Uint64
	publishes     atomic.Uint64
	keepAlives    atomic.Uint64
	sendErrors    atomic.Uint64
	overflows     atomic.Uint64
}

func newUAEngine(s *Server) *uaEngine {
	return &uaEngine{
		s:        s,
		sessions: make(map[string]*uaSession),
		subs:     make(map[uint32]*uaSub),
		byNode:   make(map[*uaNode]map[*uaItem]struct{}),
	}
}

// reset deletes every session and subscription, as a process death does,
// and waits for the subscription goroutines. Connections must be closed
// first, so that no goroutine is stuck writing to a live one.
func (e *uaEngine) reset() {
	e.mu.Lock()
	exits := make([]chan struct{}, 0, len(e.subs))
	for _, sub := range e.subs {
		e.deleteSubLocked(sub)
		exits = append(exits, sub.exited)
	}
	clear(e.sessions)
	e.mu.Unlock()
	for _, ch := range exits {
		<-ch
	}
}

// stop is reset for good: no subscription can be created after it.
func (e *uaEngine) stop() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.reset()
	e.wg.Wait()
}

// Stats counts what a server has served since the pair started.
type Stats struct {
	Sessions        int    // open sessions
	Subscriptions   int    // live subscriptions
	MonitoredItems  int    // monitored items in live subscriptions
	DisabledItems   int    // of those, in the Disabled monitoring mode
	QueuedPublishes int    // Publish requests waiting for a response
	Notifications   uint64 // data change notifications sent
	Publishes       uint64 // PublishResponses sent, keep-alives included
	KeepAlives      uint64 // keep-alive PublishResponses sent
	Overflows       uint64 // samples discarded because an item's queue was full
	SendErrors      uint64 // PublishResponses that failed to send
	ItemsCreated    uint64 // monitored items created since the start, deleted ones included
	NodesRead       uint64 // attributes asked for by Read requests since the start
	NodesWritten    uint64 // values sent in Write requests since the start, refused ones included
}

func (e *uaEngine) stats() Stats {
	e.mu.Lock()
	st := Stats{Sessions: len(e.sessions), Subscriptions: len(e.subs)}
	for _, sub := range e.subs {
		st.MonitoredItems += len(sub.items)
		for _, it := range sub.items {
			if it.mode == ua.MonitoringModeDisabled {
				st.DisabledItems++
			}
		}
	}
	for _, sess := range e.sessions {
		st.QueuedPublishes += len(sess.pubq)
	}
	e.mu.Unlock()
	st.Notifications = e.notifications.Load()
	st.Publishes = e.publishes.Load()
	st.KeepAlives = e.keepAlives.Load()
	st.Overflows = e.overflows.Load()
	st.SendErrors = e.sendErrors.Load()
	st.ItemsCreated = e.itemsCreated.Load()
	st.NodesRead = e.nodesRead.Load()
	st.NodesWritten = e.nodesWritten.Load()
	return st
}

// SubscriptionInfo describes one live subscription of a Server.
type SubscriptionInfo struct {
	ID       uint32
	Priority byte          // as the client asked for it
	Interval time.Duration // the revised publishing interval
	Items    int           // monitored items
	// Retained are the sequence numbers of the data messages sent and
	// not yet acknowledged, oldest first: what Republish can give back.
	Retained []uint32
}

func (e *uaEngine) subscriptions() []SubscriptionInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]SubscriptionInfo, 0, len(e.subs))
	for _, sub := range e.subs {
		out = append(out, SubscriptionInfo{ID: sub.id, Priority: sub.priority, Interval: sub.interval, Items: len(sub.items), Retained: sub.available()})
	}
	slices.SortFunc(out, func(a, b SubscriptionInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
