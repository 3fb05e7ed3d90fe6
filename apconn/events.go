package apconn

import (
	"sync"
	"time"
)

// Cause says why a switch or re-home happened.
type Cause int

const (
	// CauseLameDuck: the active's broker announced lame-duck mode.
	CauseLameDuck Cause = iota + 1
	// CauseActiveDown: the active's connection was closed or reset by its
	// broker (a broker that died, or an eviction at the end of LDM).
	CauseActiveDown
	// CauseLinkTimeout: the active's broker stopped answering PINGs.
	CauseLinkTimeout
	// CauseManual: SwitchToPassive or RehomePassive was called.
	CauseManual
	// CausePassiveLameDuck: the passive's broker announced lame-duck mode.
	CausePassiveLameDuck
	// CausePassiveDown: the passive's connection was lost or timed out.
	CausePassiveDown
	// CauseSameServer: the passive ended up on the active's broker.
	CauseSameServer
)

var causeNames = map[Cause]string{
	CauseLameDuck:        "lame-duck",
	CauseActiveDown:      "active-down",
	CauseLinkTimeout:     "link-timeout",
	CauseManual:          "manual",
	CausePassiveLameDuck: "passive-lame-duck",
	CausePassiveDown:     "passive-down",
	CauseSameServer:      "same-server",
}

func (c Cause) String() string {
	if s, ok := causeNames[c]; ok {
		return s
	}
	return "unknown"
}

// EventKind says what an Event reports.
type EventKind int

const (
	// EventSwitched: the passive was promoted to active. Cause, From, To
	// and Duration are set.
	EventSwitched EventKind = iota + 1
	// EventPassiveArmed: a new passive is connected and proven end to end.
	// To is its server; Cause says why the previous one was replaced.
	EventPassiveArmed
	// EventPassiveLost: the passive was lost or retired; From is its server.
	EventPassiveLost
	// EventLameDuck: a broker of this Conn announced lame-duck mode. From is
	// the broker; Role says whether it serves the active or the passive.
	EventLameDuck
	// EventDegraded: the Conn has no usable passive (fewer than two
	// distinct reachable brokers) and keeps trying to arm one. Err says why
	// the last attempt failed.
	EventDegraded
	// EventActiveDown: the active was lost and no passive could take over;
	// nats.go's reconnect is running and publishes are held.
	EventActiveDown
	// EventReconnected: the active reconnected by itself (no passive took
	// over); held publishes were sent.
	EventReconnected
	// EventClosed: the Conn was closed.
	EventClosed
)

var kindNames = map[EventKind]string{
	EventSwitched:     "switched",
	EventPassiveArmed: "passive-armed",
	EventPassiveLost:  "passive-lost",
	EventLameDuck:     "lame-duck",
	EventDegraded:     "degraded",
	EventActiveDown:   "active-down",
	EventReconnected:  "reconnected",
	EventClosed:       "closed",
}

func (k EventKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "unknown"
}

// Role is the part a nats.Conn plays in a Conn.
type Role int

const (
	// RoleActive carries publishes and subscriptions.
	RoleActive Role = iota + 1
	// RolePassive is connected, idle and ready to be promoted.
	RolePassive
)

func (r Role) String() string {
	switch r {
	case RoleActive:
		return "active"
	case RolePassive:
		return "passive"
	}
	return "none"
}

// Server identifies the broker one of the Conn's connections is on.
type Server struct {
	URL      string // the URL the connection was made to
	ID       string // the broker's server ID (changes when it restarts)
	Name     string // the broker's server name
	ClientID uint64 // the connection's client ID on that broker
}

// Event is something a library user may want to observe or log.
type Event struct {
	Kind  EventKind
	Cause Cause
	Role  Role
	From  Server
	To    Server
	// At is when the event completed.
	At time.Time
	// Triggered is when the trigger was seen (the LDM notice, the
	// disconnect), for switches and re-homes.
	Triggered time.Time
	// Duration is from Triggered to At.
	Duration time.Duration
	// Replayed counts publishes sent again on the new active because the
	// old one had not confirmed them.
	Replayed int
	Err      error
}

// dispatcher delivers events in order on its own goroutine, so that a slow
// user handler never holds up a switch. The goroutine starts with the
// first handler: a Conn nobody listens to runs none.
type dispatcher struct {
	mu       sync.Mutex
	handlers map[uint64]func(Event)
	nextID   uint64
	q        []Event
	wake     chan struct{}
	done     chan struct{}
	started  bool
	shut     bool
}

func newDispatcher(h func(Event)) *dispatcher {
	d := &dispatcher{handlers: map[uint64]func(Event){}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if h != nil {
		d.add(h)
	}
	return d
}

// add registers h and returns a function that removes it.
func (d *dispatcher) add(h func(Event)) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut {
		return func() {}
	}
	d.nextID++
	id := d.nextID
	d.handlers[id] = h
	if !d.started {
		d.started = true
		go d.run()
	}
	return func() {
		d.mu.Lock()
		delete(d.handlers, id)
		d.mu.Unlock()
	}
}

func (d *dispatcher) emit(e Event) {
	d.mu.Lock()
	if d.shut || len(d.handlers) == 0 {
		d.mu.Unlock()
		return
	}
	d.q = append(d.q, e)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// close delivers what is queued, then stops the goroutine.
func (d *dispatcher) close() {
	d.mu.Lock()
	started := d.started
	if !d.shut {
		d.shut = true
		close(d.wake)
	}
	d.mu.Unlock()
	if started {
		<-d.done
	}
}

func (d *dispatcher) run() {
	defer close(d.done)
	for range d.wake {
		for {
			d.mu.Lock()
			if len(d.q) == 0 {
				d.mu.Unlock()
				break
			}
			e := d.q[0]
			d.q = d.q[1:]
			hs := make([]func(Event), 0, len(d.handlers))
			for id := uint64(1); id <= d.nextID; id++ {
				if h, ok := d.handlers[id]; ok {
					hs = append(hs, h)
				}
			}
			d.mu.Unlock()
			for _, h := range hs {
				h(e)
			}
		}
	}
}
