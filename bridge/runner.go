package bridge

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// runner drives one source: it is the source's Handler and runs its
// subscribe guard.
type runner struct {
	b        *Bridge
	src      Source
	tags     []*tagState
	byHandle map[uint32]*tagState
	// dense is byHandle as a slice indexed by handle - denseBase, for
	// Update: a tag's lookup on every update costs an index instead of a
	// hash probe into a map of thousands. reindexLocked rebuilds it after
	// every change of byHandle; nil while the handles are too sparse
	// (changes leave holes, handles are never used again), and Update
	// falls back to the map.
	dense     []*tagState
	denseBase uint32

	// tagsLater: the source gets tags by AddTags (WithTagsLater).
	tagsLater bool
	// nextHandle is the handle the next tag gets: handles are never used
	// again, so that a late update for a removed or moved tag's old item
	// cannot be taken for another tag's.
	nextHandle uint32

	// cancel ends the runner's context (its guard, its source's Start):
	// the bridge's closing, or the source's removal (Apply). done is
	// closed when run has returned.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// subMu is held by a subscribe from the listing of its tags until
	// the source answered; a change waits for it before it removes tags
	// at the source: an item removed while a subscribe that listed it is
	// on its way would be created after its removal, and stay.
	subMu sync.Mutex
	// subStarted, when not nil, is closed by the next subscribe once it
	// holds subMu and has listed its tags (guarded by mu): a change
	// that adds and removes tags lets its additions go first.
	subStarted chan struct{}

	// spare is the message of the last update, for the next one to take
	// and fill again, when the sink is the core sink: apconn keeps the
	// payload and the header strings, not the message or its header map.
	// Taken and given back without r.mu (the publish is outside it), and
	// a second update at the same time gets a new one: the source calls
	// Update one at a time, but nothing here relies on it.
	spare atomic.Pointer[wire.MsgBuf]

	mu         sync.Mutex // guards tags, byHandle, the tags' mutable fields and the fields below
	refreshing bool
	health     Health
	lastLen    int

	// guardMu serialises guardLoop and Bridge.Stats on guard, which is not
	// safe for concurrent use.
	guardMu sync.Mutex
	guard   *subscribeGuard
	// inFlightCeiling is the guard's, raised to the source's reply bound.
	inFlightCeiling time.Duration
	events          chan guardEvent
	// wants asks the guard for a subscribe of the tags not yet
	// subscribed; one pending ask stands for any number.
	wants chan struct{}
	// startDone is closed when the source's Start has returned.
	startDone chan struct{}

	counters sourceCounters
	// marks are the source's AfterStored calls (stored.go).
	marks storeMarks
}

type sourceCounters struct {
	updates, published, publishErrors, unsupported atomic.Uint64
	subscribeRequests, subscribeFailures           atomic.Uint64
	lostReplies, writes, writeErrors               atomic.Uint64
	refreshes                                      atomic.Uint64
}

type guardEventKind int

const (
	evRestored guardEventKind = iota + 1
	evReply
)

type guardEvent struct {
	kind    guardEventKind
	id      uint64
	results map[uint32]error // per tag handle
	err     error            // the request as a whole
}

func newRunner(b *Bridge, src Source) *runner {
	r := &runner{
		b: b, src: src, byHandle: map[uint32]*tagState{}, nextHandle: 1,
		events: make(chan guardEvent, 16), wants: make(chan struct{}, 1),
		startDone: make(chan struct{}), done: make(chan struct{}),
		marks:  storeMarks{wake: make(chan struct{}, 1)},
		health: Health{State: StateConnecting, Level: -1},
	}
	gc := b.cfg.Guard
	if rb, ok := src.(ReplyBounder); ok {
		gc.InFlightCeiling = max(gc.InFlightCeiling, rb.SubscribeReplyBound())
	}
	r.inFlightCeiling = gc.InFlightCeiling
	r.guard = newSubscribeGuard(gc, rand.Float64)
	return r
}

// Update implements Handler: one tag changed at the source.
func (r *runner) Update(handle uint32, u wire.Update) {
	r.counters.updates.Add(1)
	r.mu.Lock()
	ts := r.tagLocked(handle)
	if ts == nil {
		r.mu.Unlock()
		return
	}
	typ, ok := wire.TypeOf(u.Value)
	if !ok {
		r.counters.unsupported.Add(1)
		u = wire.Unsupported(ts.cfg.Name, u.Value, u.SourceTime, u.ServerTime)
		typ = wire.TypeNull
	}
	ts.seq++
	u.Tag, u.Seq = ts.cfg.Name, ts.seq
	ts.last, ts.have = u, true
	var buf *wire.MsgBuf
	if _, core := r.b.sink.(*CoreSink); core {
		if buf = r.spare.Swap(nil); buf == nil {
			buf = new(wire.MsgBuf)
		}
	}
	m := r.encodeLocked(ts.subject, &u, typ, buf)
	r.mu.Unlock()
	// Outside r.mu: a sink may block here (backpressure), and status,
	// snapshot and write-back must not wait for it. The order of a tag's
	// updates is kept by the source calling Update one at a time.
	err := r.publish(m, u)
	if buf != nil {
		r.spare.Store(buf)
	}
	if err != nil {
		r.counters.publishErrors.Add(1)
		r.b.log.Warn().Err(err).Str("source", r.src.Name()).Str("tag", u.Tag).Msg("publish failed")
		return
	}
	r.counters.published.Add(1)
}

// publish hands m, which carries u, to the sink. The core sink is called
// directly: through the interface u would move to the heap on every update
// (the compiler cannot see that a sink keeps no pointer to it), for a sink
// that does not even read it. Other sinks get a copy of their own.
func (r *runner) publish(m *nats.Msg, u wire.Update) error {
	if cs, ok := r.b.sink.(*CoreSink); ok {
		return cs.Publish(r.src.Name(), m, &u)
	}
	return r.publishVia(m, u)
}

func (r *runner) publishVia(m *nats.Msg, u wire.Update) error {
	return r.b.sink.Publish(r.src.Name(), m, &u)
}

// tagLocked returns the tag of handle, nil for none; r.mu is held.
func (r *runner) tagLocked(handle uint32) *tagState {
	if r.dense != nil {
		if i := handle - r.denseBase; i < uint32(len(r.dense)) {
			return r.dense[i]
		}
		return nil
	}
	return r.byHandle[handle]
}

// reindexLocked rebuilds dense from byHandle; r.mu is held. The slice
// spans the lowest handle to the highest and is kept only while at most
// half of it is holes (plus a little slack for small sources), so that it
// never holds much more than the map would.
func (r *runner) reindexLocked() {
	r.dense, r.denseBase = nil, 0
	if len(r.byHandle) == 0 {
		return
	}
	lo, hi := uint32(math.MaxUint32), uint32(0)
	for h := range r.byHandle {
		lo, hi = min(lo, h), max(hi, h)
	}
	span := uint64(hi-lo) + 1
	if span > 2*uint64(len(r.byHandle))+64 {
		return
	}
	dense := make([]*tagState, span)
	for h, ts := range r.byHandle {
		dense[h-lo] = ts
	}
	r.dense, r.denseBase = dense, lo
}

// encodeLocked encodes u, whose value is of type typ, as the message for
// the sink, into buf if it is not nil (the core sink's); r.mu is held.
func (r *runner) encodeLocked(subject string, u *wire.Update, typ wire.Type, buf *wire.MsgBuf) *nats.Msg {
	// A fresh payload per update, sized from the last one (it rarely
	// grows): the sink keeps it until the broker confirms it. A fresh
	// message too for a sink other than the core sink, which may keep it.
	var m *nats.Msg
	if buf != nil {
		m = wire.EncodeMsgTo(buf, subject, u, typ, r.lastLen+32, !r.b.cfg.NoHeaders, r.refreshing)
	} else {
		m = wire.EncodeMsg(subject, u, typ, r.lastLen+32, !r.b.cfg.NoHeaders, r.refreshing)
	}
	if m.Header != nil {
		m.Header[wire.HeaderEpoch] = r.b.epoch
	}
	r.lastLen = len(m.Data)
	return m
}

// RefreshStart implements Handler.
func (r *runner) RefreshStart(reason string) {
	r.counters.refreshes.Add(1)
	r.mu.Lock()
	r.refreshing = true
	r.mu.Unlock()
	r.b.publishEvent(r.src.Name(), map[string]any{"source": r.src.Name(), "event": "refresh-start", "reason": reason})
}

// RefreshEnd implements Handler.
func (r *runner) RefreshEnd() {
	r.mu.Lock()
	r.refreshing = false
	r.mu.Unlock()
	r.b.publishEvent(r.src.Name(), map[string]any{"source": r.src.Name(), "event": "refresh-end"})
}

// HealthChanged implements Handler.
func (r *runner) HealthChanged(h Health) {
	r.mu.Lock()
	prev := r.health
	r.health = h
	r.mu.Unlock()
	r.b.noteHealthChange()
	if h.LastSwitch != "" && h.LastAt.After(prev.LastAt) {
		// One line per failover, with its cause and duration as fields.
		r.b.log.Info().Str("source", r.src.Name()).Str("cause", h.LastSwitchCause).Str("endpoint", h.Endpoint).
			Float64("duration_ms", float64(h.LastSwitchTook.Microseconds())/1000).Msg("source failover")
		if r.b.onSwitch != nil {
			r.b.onSwitch(r.src.Name(), h.LastSwitchCause, h.LastSwitchTook)
		}
	}
	if prev.State != h.State || prev.Endpoint != h.Endpoint {
		r.b.log.Info().Str("source", r.src.Name()).Str("state", string(h.State)).Str("endpoint", h.Endpoint).
			Int("service_level", h.Level).Msg("source health")
		r.b.publishEvent(r.src.Name(), map[string]any{"source": r.src.Name(), "event": "health", "health": h})
	}
}

// Restored implements Handler: the source lost its subscriptions.
//
// The tags are marked unsubscribed by the guard loop, in the order of its
// events: a reply to a request sent before the loss, taken after it, would
// otherwise mark them subscribed again, and the next request would leave
// them out though the source has lost them.
func (r *runner) Restored() { r.send(guardEvent{kind: evRestored}) }

// forgetSubscriptions marks every tag unsubscribed: the source lost them.
func (r *runner) forgetSubscriptions() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ts := range r.tags {
		ts.subscribed = false
	}
}

// awaitSubscribe returns once no subscribe that listed its tags before
// the call is still waiting for the source.
func (r *runner) awaitSubscribe() {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	_ = r.src // nothing to do under the lock: taking it was the wait
}

// nextSubscribe returns a channel the next subscribe closes once it has
// listed its tags, or nil when the guard would not send one at once (a
// request out, or a retry delay running): nothing to wait for then.
func (r *runner) nextSubscribe() <-chan struct{} {
	r.guardMu.Lock()
	now := r.guard.SendsNow(time.Now())
	r.guardMu.Unlock()
	if !now {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subStarted == nil {
		r.subStarted = make(chan struct{})
	}
	return r.subStarted
}

// want asks the guard to subscribe the tags not yet subscribed. It never
// blocks: AddTags calls it under the bridge's lock.
func (r *runner) want() {
	select {
	case r.wants <- struct{}{}:
	default: // one already pending covers these tags too
	}
}

// run starts the source and then runs its guard until ctx ends. The
// source's Start gets ctx too, so that Close ends a Start that is still
// running; a source that fails to start is reported down with the error.
func (r *runner) run(ctx context.Context) {
	defer r.b.wg.Done()
	defer close(r.done)
	sctx, stop := context.WithCancel(ctx)
	stored := make(chan struct{})
	go func() {
		defer close(stored)
		r.storeLoop(sctx)
	}()
	defer func() {
		stop()
		<-stored
	}()
	err := r.src.Start(ctx, r)
	close(r.startDone)
	if err != nil {
		if ctx.Err() == nil {
			r.b.log.Error().Err(err).Str("source", r.src.Name()).Msg("source did not start")
		}
		r.HealthChanged(Health{State: StateDown, Level: -1, Detail: "start failed: " + err.Error()})
		return
	}
	r.want()
	r.guardLoop(ctx)
}

// awaitStart waits until the source's Start has returned, or ctx ends.
func (r *runner) awaitStart(ctx context.Context) {
	select {
	case <-r.startDone:
	case <-ctx.Done():
		r.b.log.Warn().Str("source", r.src.Name()).Msg("source still starting at shutdown; closing it anyway")
	}
}

func (r *runner) send(e guardEvent) {
	select {
	case r.events <- e:
	case <-r.ctx.Done():
	}
}

// supersedeWait bounds how long a new subscribe waits for the one it
// supersedes to return: a source that ignores cancellation must not stop
// the guard.
const supersedeWait = 2 * time.Second

// guardLoop runs the source's subscribe guard: it decides when a subscribe
// request goes, runs it on a goroutine of its own and cancels it when it is
// superseded.
func (r *runner) guardLoop(ctx context.Context) {
	var inflight sync.WaitGroup
	// cancelReq cancels the request in flight: when it is superseded, and
	// on the way out.
	cancelReq := func() {}
	var reqDone chan struct{} // closed when the last request returned
	defer func() {
		cancelReq()
		inflight.Wait()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var d guardDecision
		select {
		case <-ctx.Done():
			return
		case <-r.wants:
			r.guardMu.Lock()
			d = r.guard.Want(time.Now())
			r.guardMu.Unlock()
		case e := <-r.events:
			now := time.Now()
			r.guardMu.Lock()
			switch e.kind {
			case evRestored:
				r.forgetSubscriptions()
				d = r.guard.Restored(now)
			case evReply:
				// Only the current request's results count: a superseded
				// one was sent before the source lost its subscriptions,
				// or is presumed lost and asked again.
				ok, more := false, false
				if r.guard.current(e.id) {
					ok, more = r.applyReply(e)
				}
				d = r.guard.Reply(now, e.id, ok)
				if ok && more {
					// Tags added (or moved) while the request was out:
					// asked for now, not at the next retry.
					d = r.guard.Want(now)
				}
			}
			r.guardMu.Unlock()
		case <-timer.C:
			r.guardMu.Lock()
			before := r.guard.Stats().LostReplies
			d = r.guard.Tick(time.Now())
			if r.guard.Stats().LostReplies > before {
				r.counters.lostReplies.Add(1)
				r.b.log.Warn().Str("source", r.src.Name()).Dur("ceiling_ms", r.inFlightCeiling).
					Msg("subscribe unanswered: presuming the reply lost, sending again")
			}
			r.guardMu.Unlock()
		}
		if d.Send {
			cancelReq() // superseded
			// One request in flight at the source, not only in the
			// guard's books: the superseded one returns (cancelled)
			// before the next goes.
			if reqDone != nil {
				t := time.NewTimer(supersedeWait)
				select {
				case <-reqDone:
				case <-t.C:
					r.b.log.Warn().Str("source", r.src.Name()).Dur("waited_ms", supersedeWait).
						Msg("a superseded subscribe did not return when cancelled; sending the next anyway")
				case <-ctx.Done():
				}
				t.Stop()
			}
			rctx, cancel := context.WithCancel(ctx)
			cancelReq = cancel
			done := make(chan struct{})
			reqDone = done
			inflight.Add(1)
			go func(id uint64) {
				defer inflight.Done()
				defer close(done)
				r.subscribe(rctx, id, d.Reason)
			}(d.ReqID)
		}
		r.guardMu.Lock()
		next, ok := r.guard.NextDeadline()
		r.guardMu.Unlock()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if ok {
			timer.Reset(max(time.Until(next), 0))
		} else {
			timer.Reset(time.Hour)
		}
	}
}

// subscribe sends one subscribe request for every tag not yet subscribed.
func (r *runner) subscribe(ctx context.Context, id uint64, reason string) {
	// The tags are listed under subMu too: a tag a change removes is
	// either in this request, and removed at the source after it, or not
	// in it.
	r.subMu.Lock()
	defer r.subMu.Unlock()
	r.mu.Lock()
	// Counted first: a retry of a few tags of 10,000 allocates for those.
	n := 0
	for _, ts := range r.tags {
		if !ts.subscribed {
			n++
		}
	}
	tags := make([]Tag, 0, n)
	for _, ts := range r.tags {
		if !ts.subscribed {
			tags = append(tags, Tag{Name: ts.cfg.Name, Address: ts.cfg.Address, Handle: ts.handle})
		}
	}
	if r.subStarted != nil {
		close(r.subStarted)
		r.subStarted = nil
	}
	r.mu.Unlock()
	r.counters.subscribeRequests.Add(1)
	r.b.log.Info().Str("source", r.src.Name()).Int("tags", len(tags)).Str("reason", reason).Uint64("request", id).Msg("subscribing")
	e := guardEvent{kind: evReply, id: id, results: make(map[uint32]error, len(tags))}
	if len(tags) > 0 {
		errs, err := r.src.Subscribe(ctx, tags)
		e.err = err
		for i, t := range tags {
			if err == nil && i < len(errs) {
				e.results[t.Handle] = errs[i]
			} else if err == nil {
				e.results[t.Handle] = errors.New("no result from the source")
			}
		}
	}
	if ctx.Err() != nil {
		return // superseded or closing: the guard has moved on
	}
	r.send(e)
}

// applyReply records per-tag results and reports whether every tag of
// the request is now subscribed (ok), and whether tags the request did not
// carry wait for one (more: added while it was out).
func (r *runner) applyReply(e guardEvent) (ok, more bool) {
	if e.err != nil {
		r.counters.subscribeFailures.Add(1)
		r.b.log.Warn().Err(e.err).Str("source", r.src.Name()).Msg("subscribe failed")
		return false, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	all := true
	failed := 0
	for h, err := range e.results {
		ts := r.byHandle[h]
		if ts == nil {
			continue
		}
		if err != nil {
			if msg := err.Error(); msg != ts.subErr {
				// Once per tag and reason: the guard retries, the log
				// must not repeat it every time.
				r.b.log.Warn().Str("source", r.src.Name()).Str("tag", ts.cfg.Name).Err(err).Msg("tag not subscribed")
				ts.subErr = msg
			}
			all = false
			failed++
			continue
		}
		ts.subscribed, ts.subErr = true, ""
	}
	for _, ts := range r.tags {
		if _, asked := e.results[ts.handle]; !ts.subscribed && !asked {
			more = true
		}
	}
	if failed > 0 {
		r.counters.subscribeFailures.Add(1)
		r.b.log.Warn().Str("source", r.src.Name()).Int("failed", failed).Msg("some tags could not be subscribed; will retry")
	}
	return all, more
}
