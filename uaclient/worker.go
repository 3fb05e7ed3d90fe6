package uaclient

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopcua/opcua/ua"
)

// desire is the item state a session must reach: every item of the list
// in the given monitoring mode, and nothing else. A newer desire replaces
// an older one that the worker has not taken yet.
type desire struct {
	version  uint64
	items    []itemSpec
	mode     ua.MonitoringMode
	snapshot bool // read the current value of every item afterwards
}

func (c *conn) setDesire(d desire) {
	c.wmu.Lock()
	if c.want != nil && c.want.snapshot {
		d.snapshot = true
	}
	c.want = &d
	c.wmu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *conn) takeDesire() *desire {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	d := c.want
	c.want = nil
	return d
}

type monItem struct {
	id   uint32
	mode ua.MonitoringMode
	spec itemSpec
}

type failedItem struct {
	spec   itemSpec
	status ua.StatusCode
}

// snapValue is one item's value in a snapshot.
type snapValue struct {
	handle uint32
	dv     *ua.DataValue
}

// itemState is what a session's data subscription holds: the items
// created (by handle) and those the server rejected. A session that takes
// another's subscriptions over takes its itemState too.
type itemState struct {
	have   map[uint32]*monItem
	failed map[uint32]failedItem
}

func newItemState() *itemState {
	return &itemState{have: map[uint32]*monItem{}, failed: map[uint32]failedItem{}}
}

// worker brings the session's data items to the latest desire, one desire
// at a time, so that item changes on one session never interleave.
func (c *conn) worker() {
	have, failed := c.items.have, c.items.failed
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		}
		for d := c.takeDesire(); d != nil; d = c.takeDesire() {
			res := c.reconcile(d, have, failed)
			if res.err == nil && c.p.opt.onHandoff != nil {
				res.items = itemsOf(have)
			}
			if !c.p.post(res) || res.err != nil {
				return
			}
		}
	}
}

func (c *conn) reconcile(d *desire, have map[uint32]*monItem, failed map[uint32]failedItem) evReconciled {
	res := evReconciled{s: c.s, version: d.version, status: make(map[uint32]ua.StatusCode, len(d.items))}
	ctx, cancel := context.WithTimeout(c.ctx, c.p.set.Failover.ConnectTimeout)
	defer cancel()
	wanted := make(map[uint32]itemSpec, len(d.items))
	for _, it := range d.items {
		wanted[it.handle] = it
	}

	// Items no longer wanted, or wanted differently, go.
	var del []uint32
	var recreated map[uint32]bool // handles whose old item may still send a sample
	for h, m := range have {
		if w, ok := wanted[h]; !ok || !w.same(m.spec) {
			del = append(del, m.id)
			delete(have, h)
			if ok {
				if recreated == nil {
					recreated = map[uint32]bool{}
				}
				recreated[h] = true
			}
		}
	}
	for h, f := range failed {
		if w, ok := wanted[h]; !ok || !w.same(f.spec) {
			delete(failed, h)
		}
	}
	slices.Sort(del)
	for chunk := range slices.Chunk(del, c.p.set.BatchSize) {
		if _, err := send[*ua.DeleteMonitoredItemsResponse](ctx, c.client, &ua.DeleteMonitoredItemsRequest{
			SubscriptionID: c.dataSub, MonitoredItemIDs: chunk,
		}); err != nil {
			res.err = fmt.Errorf("delete monitored items: %w", err)
			return res
		}
	}

	// The wanted items go in batches, in the desire's order, up to
	// batchesInFlight at once. Each batch is brought to the wanted mode
	// (created, or switched) and, for a snapshot, read and posted at once:
	// a promotion's first values reach consumers after one batch, not
	// after every item, so the switch does not grow with the tag count.
	var mu sync.Mutex // guards have and failed while batches run at once
	first := c.p.set.BatchSize
	if d.snapshot {
		// The first batch is small and goes alone: the first values
		// flow after one short round trip, not after a full batch that
		// shares the server with three others.
		first = min(first, firstSnapshotBatch)
		// Later batches take their values from the items' first samples
		// (see firstValues); the first batch reads them, because a Read
		// answers sooner than the next publishing cycle.
		c.first.start()
		defer c.first.stop()
	}
	// sent closes when every batch has had its create or switch answered.
	sent := make(chan struct{})
	closeSent := sync.OnceFunc(func() { close(sent) })
	defer closeSent()
	var unsent atomic.Int64
	unsent.Store(int64(batchCount(len(d.items), first, c.p.set.BatchSize)))
	requested := func() {
		if unsent.Add(-1) == 0 {
			closeSent()
		}
	}
	err := inBatches(len(d.items), first, c.p.set.BatchSize, func(start, end int, slot *batchSlot) error {
		b := batchRun{ctx: ctx, d: d, items: d.items[start:end], have: have, failed: failed, mu: &mu, slot: slot,
			fromSamples: d.snapshot && start > 0, recreated: recreated, sent: sent, requested: requested}
		part, err := c.reconcileBatch(b)
		if err != nil {
			return err
		}
		if d.snapshot && !c.p.post(evSnapshotPart{s: c.s, version: d.version, start: start, values: part}) {
			return ErrClosed
		}
		return nil
	})
	for h := range wanted {
		if f, ok := failed[h]; ok {
			res.status[h] = f.status
		} else {
			res.status[h] = ua.StatusOK
		}
	}
	if err != nil {
		res.err = err
		return res
	}
	res.snapshotted = d.snapshot
	return res
}

// batchRun is one batch of a desire being reconciled.
type batchRun struct {
	ctx    context.Context
	d      *desire
	items  []itemSpec
	have   map[uint32]*monItem
	failed map[uint32]failedItem
	mu     *sync.Mutex // guards have and failed
	slot   *batchSlot
	// fromSamples: the snapshot takes the first samples of the items
	// this batch creates or enables, and reads only the others.
	fromSamples bool
	recreated   map[uint32]bool // read-only
	requested   func()          // call once the batch's requests are answered (or failed)
	sent        <-chan struct{} // closed when every batch has called requested
}

// reconcileBatch creates the items of the batch that the session lacks
// and switches those in another mode, then, for a snapshot, returns the
// current value of each: a rejected item carries its rejection.
func (c *conn) reconcileBatch(b batchRun) ([]snapValue, error) {
	requested := sync.OnceFunc(b.requested)
	defer requested()
	d, have, failed, mu := b.d, b.have, b.failed, b.mu
	var create []itemSpec
	var reqs []*ua.MonitoredItemCreateRequest
	var switching []uint32
	// enabled are the items that will report a first sample of their own:
	// created, or turned on from Disabled, in Reporting mode. An item
	// deleted and created again is left out: its old item's last sample
	// may still be on its way.
	var enabled map[uint32]bool
	if b.fromSamples && d.mode == ua.MonitoringModeReporting {
		enabled = make(map[uint32]bool, len(b.items))
	}
	mu.Lock()
	for _, it := range b.items {
		if _, ok := failed[it.handle]; ok {
			continue
		}
		if m, ok := have[it.handle]; ok {
			if m.mode != d.mode {
				switching = append(switching, m.id)
				if enabled != nil && m.mode == ua.MonitoringModeDisabled {
					enabled[it.handle] = true
				}
			}
			continue
		}
		// A node ID by namespace URI that this server lacks fails here,
		// for this server only.
		node, err := it.node.Resolve(c.ns)
		if err != nil {
			c.p.log.Warn().Str("member", c.ep.String()).Uint32("item", it.handle).Str("node", it.node.String()).Err(err).
				Msg("item not created")
			failed[it.handle] = failedItem{spec: it, status: ua.StatusBadNodeIDUnknown}
			continue
		}
		create = append(create, it)
		reqs = append(reqs, itemRequest(node, it, d.mode))
		if enabled != nil && !b.recreated[it.handle] {
			enabled[it.handle] = true
		}
	}
	mu.Unlock()

	if len(reqs) > 0 {
		results, err := createItems(b.ctx, c.client, c.dataSub, reqs)
		if err != nil {
			return nil, fmt.Errorf("create monitored items: %w", err)
		}
		mu.Lock()
		for i, r := range results {
			it := create[i]
			code := ua.StatusBadInternalError
			if r != nil {
				code = r.StatusCode
			}
			if code != ua.StatusOK {
				failed[it.handle] = failedItem{spec: it, status: code}
				continue
			}
			have[it.handle] = &monItem{id: r.MonitoredItemID, mode: d.mode, spec: it}
		}
		mu.Unlock()
	}
	if len(switching) > 0 {
		slices.Sort(switching)
		if _, err := send[*ua.SetMonitoringModeResponse](b.ctx, c.client, &ua.SetMonitoringModeRequest{
			SubscriptionID: c.dataSub, MonitoringMode: d.mode, MonitoredItemIDs: switching,
		}); err != nil {
			return nil, fmt.Errorf("set monitoring mode %v: %w", d.mode, err)
		}
		mu.Lock()
		for _, it := range b.items {
			if m, ok := have[it.handle]; ok {
				m.mode = d.mode
			}
		}
		mu.Unlock()
	}
	requested()
	if !d.snapshot {
		return nil, nil
	}

	part := make([]snapValue, 0, len(b.items))
	var waitFor []uint32
	mu.Lock()
	for _, it := range b.items {
		if f, ok := failed[it.handle]; ok {
			dv := &ua.DataValue{Status: f.status, ServerTimestamp: time.Now()}
			dv.UpdateMask()
			part = append(part, snapValue{handle: it.handle, dv: dv})
			continue
		}
		if enabled[it.handle] {
			waitFor = append(waitFor, it.handle)
		}
		part = append(part, snapValue{handle: it.handle})
	}
	mu.Unlock()
	if len(waitFor) > 0 {
		// The server owes these items' first samples: wait for them
		// without holding a place among the requests in flight.
		b.slot.release()
		got := c.first.await(b.ctx, waitFor, b.sent, firstValuesWait(c.p.set.PublishingInterval))
		for i := range part {
			if dv, ok := got[part[i].handle]; ok {
				part[i].dv = dv
			}
		}
		if len(got) < len(waitFor) {
			c.p.log.Debug().Str("member", c.ep.String()).Int("items", len(waitFor)-len(got)).
				Msg("first samples missing from the snapshot: reading them")
		}
	}
	var nodes []*ua.NodeID
	var idx []int
	for i, v := range part {
		if v.dv != nil {
			continue
		}
		node, err := b.items[i].node.Resolve(c.ns) // part[i] is b.items[i]
		if err != nil {
			continue // failed above
		}
		idx = append(idx, i)
		nodes = append(nodes, node)
	}
	if len(nodes) == 0 {
		return part, nil
	}
	if err := b.slot.take(b.ctx); err != nil {
		return nil, err
	}
	dvs, err := readValues(b.ctx, c.client, nodes)
	if err != nil {
		return nil, fmt.Errorf("read the snapshot: %w", err)
	}
	for i, dv := range dvs {
		if dv == nil {
			dv = &ua.DataValue{Status: ua.StatusBadNoData}
		}
		part[idx[i]].dv = dv
	}
	return part, nil
}

// batchesInFlight bounds the requests a promotion has out at once: enough
// to overlap round trips and the server's work, few enough that a server's
// limits on concurrent requests are not reached.
const batchesInFlight = 4

// firstSnapshotBatch is the size of a snapshot's first batch.
const firstSnapshotBatch = 50

// batchSlot is a batch's place among the requests in flight.
type batchSlot struct {
	sem  chan struct{}
	held bool
}

// take waits for a place, unless the batch holds one.
func (b *batchSlot) take(ctx context.Context) error {
	if b.held {
		return nil
	}
	select {
	case b.sem <- struct{}{}:
		b.held = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives the place up, if the batch holds one.
func (b *batchSlot) release() {
	if b.held {
		b.held = false
		<-b.sem
	}
}

// inBatches calls f for each batch [start, end) of n elements, up to
// batchesInFlight at once, and returns the first error. A batch holds its
// place until f returns or releases it (to wait for something other than
// a request). The first batch has first elements and runs alone; the
// others have size.
func inBatches(n, first, size int, f func(start, end int, slot *batchSlot) error) error {
	if first < size && n > first {
		slot := &batchSlot{sem: make(chan struct{}, 1), held: true}
		slot.sem <- struct{}{}
		err := f(0, first, slot)
		slot.release()
		if err != nil {
			return err
		}
		return inBatches(n-first, size, size, func(start, end int, slot *batchSlot) error { return f(first+start, first+end, slot) })
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, batchesInFlight)
	for start := 0; start < n; start += size {
		end := min(start+size, n)
		slot := &batchSlot{sem: sem}
		slot.take(context.Background())
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer slot.release()
			if err := f(start, end, slot); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// batchCount is how many batches inBatches makes of n elements.
func batchCount(n, first, size int) int {
	if first < size && n > first {
		return 1 + batchCount(n-first, size, size)
	}
	return (n + size - 1) / size
}
