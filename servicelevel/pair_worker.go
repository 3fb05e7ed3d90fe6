package servicelevel

import (
	"context"
	"fmt"
	"slices"
	"sync"
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

func (s *session) setDesire(d desire) {
	s.wmu.Lock()
	if s.want != nil && s.want.snapshot {
		d.snapshot = true
	}
	s.want = &d
	s.wmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *session) takeDesire() *desire {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	d := s.want
	s.want = nil
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
func (s *session) worker() {
	have, failed := s.items.have, s.items.failed
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
		}
		for d := s.takeDesire(); d != nil; d = s.takeDesire() {
			res := s.reconcile(d, have, failed)
			if !s.p.post(res) || res.err != nil {
				return
			}
		}
	}
}

func (s *session) reconcile(d *desire, have map[uint32]*monItem, failed map[uint32]failedItem) evReconciled {
	res := evReconciled{s: s, version: d.version, status: make(map[uint32]ua.StatusCode, len(d.items))}
	ctx, cancel := context.WithTimeout(s.ctx, s.p.set.Failover.ConnectTimeout)
	defer cancel()
	wanted := make(map[uint32]itemSpec, len(d.items))
	for _, it := range d.items {
		wanted[it.handle] = it
	}

	// Items no longer wanted, or wanted differently, go.
	var del []uint32
	for h, m := range have {
		if w, ok := wanted[h]; !ok || !w.same(m.spec) {
			del = append(del, m.id)
			delete(have, h)
		}
	}
	for h, f := range failed {
		if w, ok := wanted[h]; !ok || !w.same(f.spec) {
			delete(failed, h)
		}
	}
	slices.Sort(del)
	for chunk := range slices.Chunk(del, s.p.set.BatchSize) {
		if _, err := send[*ua.DeleteMonitoredItemsResponse](ctx, s.c, &ua.DeleteMonitoredItemsRequest{
			SubscriptionID: s.dataSub, MonitoredItemIDs: chunk,
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
	first := s.p.set.BatchSize
	if d.snapshot {
		// The first batch is small and goes alone: the first values
		// flow after one short round trip, not after a full batch that
		// shares the server with three others.
		first = min(first, firstSnapshotBatch)
	}
	err := inBatches(len(d.items), first, s.p.set.BatchSize, func(start, end int) error {
		part, err := s.reconcileBatch(ctx, d, d.items[start:end], have, failed, &mu)
		if err != nil {
			return err
		}
		if d.snapshot && !s.p.post(evSnapshotPart{s: s, version: d.version, start: start, values: part}) {
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

// reconcileBatch creates the items of batch that the session lacks and
// switches those in another mode, then, for a snapshot, reads the current
// value of each: a rejected item carries its rejection.
func (s *session) reconcileBatch(ctx context.Context, d *desire, batch []itemSpec, have map[uint32]*monItem, failed map[uint32]failedItem, mu *sync.Mutex) ([]snapValue, error) {
	var create []itemSpec
	var reqs []*ua.MonitoredItemCreateRequest
	var switching []uint32
	mu.Lock()
	for _, it := range batch {
		if _, ok := failed[it.handle]; ok {
			continue
		}
		if m, ok := have[it.handle]; ok {
			if m.mode != d.mode {
				switching = append(switching, m.id)
			}
			continue
		}
		// A node ID by namespace URI that this server lacks fails here,
		// for this server only.
		node, err := it.resolve(s.ns)
		if err != nil {
			s.p.log.Warn().Str("member", s.ep.String()).Uint32("item", it.handle).Str("node", it.nodeStr).Err(err).
				Msg("item not created")
			failed[it.handle] = failedItem{spec: it, status: ua.StatusBadNodeIDUnknown}
			continue
		}
		create = append(create, it)
		reqs = append(reqs, itemRequest(node, it, d.mode))
	}
	mu.Unlock()

	if len(reqs) > 0 {
		results, err := createItems(ctx, s.c, s.dataSub, reqs)
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
		if _, err := send[*ua.SetMonitoringModeResponse](ctx, s.c, &ua.SetMonitoringModeRequest{
			SubscriptionID: s.dataSub, MonitoringMode: d.mode, MonitoredItemIDs: switching,
		}); err != nil {
			return nil, fmt.Errorf("set monitoring mode %v: %w", d.mode, err)
		}
		mu.Lock()
		for _, it := range batch {
			if m, ok := have[it.handle]; ok {
				m.mode = d.mode
			}
		}
		mu.Unlock()
	}
	if !d.snapshot {
		return nil, nil
	}

	part := make([]snapValue, 0, len(batch))
	var nodes []*ua.NodeID
	var idx []int
	mu.Lock()
	for _, it := range batch {
		if f, ok := failed[it.handle]; ok {
			dv := &ua.DataValue{Status: f.status, ServerTimestamp: time.Now()}
			dv.UpdateMask()
			part = append(part, snapValue{handle: it.handle, dv: dv})
			continue
		}
		node, err := it.resolve(s.ns)
		if err != nil {
			continue // failed above
		}
		idx = append(idx, len(part))
		nodes = append(nodes, node)
		part = append(part, snapValue{handle: it.handle})
	}
	mu.Unlock()
	if len(nodes) == 0 {
		return part, nil
	}
	dvs, err := readValues(ctx, s.c, nodes)
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

// inBatches calls f for each batch [start, end) of n elements, up to
// batchesInFlight at once, and returns the first error. The first batch
// has first elements and runs alone; the others have size.
func inBatches(n, first, size int, f func(start, end int) error) error {
	if first < size && n > first {
		if err := f(0, first); err != nil {
			return err
		}
		return inBatches(n-first, size, size, func(start, end int) error { return f(first+start, first+end) })
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, batchesInFlight)
	for start := 0; start < n; start += size {
		end := min(start+size, n)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(start, end); err != nil {
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
