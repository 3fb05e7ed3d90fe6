package uaclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gopcua/opcua/ua"
)

// waiter is an AddItems or RemoveItems call waiting for the active's
// worker to reach its desire.
type waiter struct {
	s       *session
	version uint64
	add     []int // indexes into results of the items added
	specs   []*itemSpec
	results []ItemResult
	reply   chan []ItemResult
	done    chan error // RemoveItems
	errs    []error
}

// AddItems adds data items, keyed by their handles, and returns one result
// per item, in order. An item whose node ID does not parse, whose handle is
// in use, or whose node the active server rejects is not added: its result
// carries the error, and the other items are unaffected. When a session
// carries the data, AddItems waits until the items are created there, and
// their first values arrive as data changes; otherwise (before Start, or
// between sessions) the items are added at once and appear in the next
// snapshot. The error is for the call as a whole: ctx's, or ErrClosed.
func (p *Pair) AddItems(ctx context.Context, items []Item) ([]ItemResult, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if !p.started {
		defer p.mu.Unlock()
		results, _ := p.preItems.register(items, &p.set)
		return results, nil
	}
	p.mu.Unlock()
	w := &waiter{reply: make(chan []ItemResult, 1)}
	if err := p.call(ctx, evAddItems{items: items, w: w}); err != nil {
		return nil, err
	}
	select {
	case r := <-w.reply:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.loopDone:
		return nil, ErrClosed
	}
}

// RemoveItems removes the items with the given handles. When a session
// carries the data it waits until they are deleted there; no update for
// them is delivered after it returns. Unknown handles are reported in the
// error (wrapping ErrUnknownHandle); the others are removed anyway.
func (p *Pair) RemoveItems(ctx context.Context, handles []uint32) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	if !p.started {
		defer p.mu.Unlock()
		return errors.Join(p.preItems.unregister(handles)...)
	}
	p.mu.Unlock()
	w := &waiter{done: make(chan error, 1)}
	if err := p.call(ctx, evRemoveItems{handles: handles, w: w}); err != nil {
		return err
	}
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-p.loopDone:
		return ErrClosed
	}
}

// itemRegistry holds the items a Pair monitors, by handle.
type itemRegistry map[uint32]*itemSpec

// register validates items with the Pair's settings for their defaults and
// adds them; it returns the results and the specs added.
func (reg itemRegistry) register(items []Item, set *PairSettings) ([]ItemResult, []*itemSpec) {
	results := make([]ItemResult, len(items))
	var added []*itemSpec
	for i, it := range items {
		r := &results[i]
		r.Handle = it.Handle
		spec, err := specOf(it, set)
		switch {
		case err != nil:
			r.Err, r.Status = err, ua.StatusBadNodeIDInvalid
		case reg[it.Handle] != nil:
			r.Err = fmt.Errorf("item %d (%s): handle already in use (by %s)", it.Handle, it.NodeID, reg[it.Handle].node)
			r.Status = ua.StatusBadInvalidArgument
		default:
			reg[it.Handle] = spec
			added = append(added, spec)
			r.Status = ua.StatusBadWaitingForInitialData
		}
	}
	return results, added
}

// unregister removes the items with handles; an unknown handle is an
// error.
func (reg itemRegistry) unregister(handles []uint32) []error {
	var errs []error
	for _, h := range handles {
		if reg[h] == nil {
			errs = append(errs, fmt.Errorf("item %d: %w", h, ErrUnknownHandle))
			continue
		}
		delete(reg, h)
	}
	return errs
}

// list returns the items in handle order.
func (reg itemRegistry) list() []itemSpec {
	out := make([]itemSpec, 0, len(reg))
	for _, it := range reg {
		out = append(out, *it)
	}
	slices.SortFunc(out, func(a, b itemSpec) int { return cmp.Compare(a.handle, b.handle) })
	return out
}

// nodeOf names the node of item h, for messages.
func (reg itemRegistry) nodeOf(h uint32) string {
	if it := reg[h]; it != nil {
		return it.node.String()
	}
	return "?"
}

// specOf is the item as the Pair monitors it: its own settings, or the
// Pair's.
func specOf(it Item, set *PairSettings) (*itemSpec, error) {
	s := strings.TrimSpace(it.NodeID)
	if s == "" {
		return nil, fmt.Errorf("item %d: node ID is empty", it.Handle)
	}
	node, err := ParseNodeID(s)
	if err != nil {
		return nil, fmt.Errorf("item %d: node ID %q: %w", it.Handle, it.NodeID, err)
	}
	spec := &itemSpec{handle: it.Handle, node: node,
		sampling: set.SamplingInterval, queue: set.QueueSize, discardOldest: set.DiscardOldest, filter: set.Filter}
	if it.DiscardOldest != nil {
		spec.discardOldest = *it.DiscardOldest
	}
	if it.Filter != nil {
		if err := it.Filter.Validate("filter"); err != nil {
			return nil, fmt.Errorf("item %d: %w", it.Handle, err)
		}
		f := *it.Filter
		spec.filter = &f
	}
	if it.SamplingInterval > 0 {
		spec.sampling = it.SamplingInterval
	}
	if it.QueueSize > 0 {
		spec.queue = it.QueueSize
	}
	return spec, nil
}

func (p *Pair) onAddItems(ev evAddItems) {
	w := ev.w
	w.results, w.specs = p.items.register(ev.items, &p.set)
	for i := range w.results {
		if w.results[i].Err == nil {
			w.add = append(w.add, i)
		}
	}
	target := p.activating
	if target == nil {
		target = p.serving
	}
	if len(w.add) == 0 || target == nil {
		if len(w.add) > 0 {
			p.pushDesires()
		}
		p.publishStatus()
		w.reply <- w.results
		return
	}
	p.pushDesires()
	w.s, w.version = target, target.wantVer
	p.waiters = append(p.waiters, w)
}

func (p *Pair) onRemoveItems(ev evRemoveItems) {
	w := ev.w
	w.errs = p.items.unregister(ev.handles)
	target := p.activating
	if target == nil {
		target = p.serving
	}
	p.pushDesires()
	if target == nil {
		p.publishStatus()
		w.done <- errors.Join(w.errs...)
		return
	}
	w.s, w.version = target, target.wantVer
	p.waiters = append(p.waiters, w)
}

// answerWaiters completes the calls that waited for s to reach a desire.
func (p *Pair) answerWaiters(s *session, ev evReconciled) {
	keep := p.waiters[:0]
	dropped := false
	var done []*waiter
	for _, w := range p.waiters {
		if w.s != s || ev.version < w.version {
			keep = append(keep, w)
			continue
		}
		done = append(done, w)
		if w.done != nil {
			continue
		}
		for j, i := range w.add {
			r, spec := &w.results[i], w.specs[j]
			code, ok := ev.status[r.Handle]
			switch {
			case !ok:
				// Removed again before it was created.
			case code == ua.StatusOK:
				r.Status = ua.StatusOK
			default:
				r.Status = code
				r.Err = fmt.Errorf("item %d (%s): rejected by %s: %w", r.Handle, spec.node, s.ep, code)
				if p.items[r.Handle] == spec {
					delete(p.items, r.Handle)
					dropped = true
				}
			}
		}
	}
	clear(p.waiters[len(keep):])
	p.waiters = keep
	if dropped {
		p.pushDesires()
	}
	p.replyAll(done)
}

// replyAll answers finished calls, after publishing the status, so that
// Status agrees with what a call that returned has done.
func (p *Pair) replyAll(done []*waiter) {
	if len(done) == 0 {
		return
	}
	p.publishStatus()
	for _, w := range done {
		if w.done != nil {
			w.done <- errors.Join(w.errs...)
		} else {
			w.reply <- w.results
		}
	}
}

// releaseWaiters answers the calls that waited for s, which is gone: the
// items stay added and are created with the next session.
func (p *Pair) releaseWaiters(s *session) {
	keep := p.waiters[:0]
	var done []*waiter
	for _, w := range p.waiters {
		if w.s != s {
			keep = append(keep, w)
			continue
		}
		done = append(done, w)
	}
	clear(p.waiters[len(keep):])
	p.waiters = keep
	p.replyAll(done)
}

// itemSpec is a registered data item, as the Pair monitors it.
type itemSpec struct {
	handle   uint32
	node     NodeID
	sampling time.Duration
	queue    uint32

	discardOldest bool
	filter        *DataChangeFilter // nil: the server's default
}

func (a itemSpec) same(b itemSpec) bool {
	return a.handle == b.handle && a.node.String() == b.node.String() && a.sampling == b.sampling && a.queue == b.queue &&
		a.discardOldest == b.discardOldest && a.filter.same(b.filter)
}
