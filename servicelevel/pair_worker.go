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

	// New items are created in the wanted mode.
	var create []itemSpec
	for _, it := range d.items {
		if _, ok := have[it.handle]; ok {
			continue
		}
		if _, ok := failed[it.handle]; ok {
			continue
		}
		create = append(create, it)
	}
	// A node ID by namespace URI that this server lacks fails here, for
	// this server only. Each item's request is built once, with the node
	// as this server numbers it.
	resolved := create[:0]
	var reqs []*ua.MonitoredItemCreateRequest
	for _, it := range create {
		node, err := it.resolve(s.ns)
		if err != nil {
			s.p.log.Warn().Str("member", s.ep.String()).Uint32("item", it.handle).Str("node", it.nodeStr).Err(err).
				Msg("item not created")
			failed[it.handle] = failedItem{spec: it, status: ua.StatusBadNodeIDUnknown}
			continue
		}
		resolved = append(resolved, it)
		reqs = append(reqs, itemRequest(node, it, d.mode))
	}
	create = resolved
	var mu sync.Mutex // guards have and failed while batches run at once
	if err := inBatches(len(create), s.p.set.BatchSize, func(start, end int) error {
		chunk := create[start:end]
		results, err := createItems(ctx, s.c, s.dataSub, reqs[start:end])
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, r := range results {
			it := chunk[i]
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
		return nil
	}); err != nil {
		res.err = fmt.Errorf("create monitored items: %w", err)
		return res
	}

	// Items in the other mode switch (a promotion or demotion in Hot mode).
	var switching []uint32
	for _, m := range have {
		if m.mode != d.mode {
			switching = append(switching, m.id)
		}
	}
	slices.Sort(switching)
	if err := inBatches(len(switching), s.p.set.BatchSize, func(start, end int) error {
		_, err := send[*ua.SetMonitoringModeResponse](ctx, s.c, &ua.SetMonitoringModeRequest{
			SubscriptionID: s.dataSub, MonitoringMode: d.mode, MonitoredItemIDs: switching[start:end],
		})
		return err
	}); err != nil {
		res.err = fmt.Errorf("set monitoring mode %v: %w", d.mode, err)
		return res
	}
	for _, m := range have {
		m.mode = d.mode
	}

	for h := range wanted {
		if f, ok := failed[h]; ok {
			res.status[h] = f.status
		} else {
			res.status[h] = ua.StatusOK
		}
	}
	if !d.snapshot {
		return res
	}
	// The snapshot: the current value of every wanted item, in handle
	// order; a rejected item carries its rejection.
	res.snapshot = make([]snapValue, 0, len(d.items))
	var nodes []*ua.NodeID
	var idx []int
	for _, it := range d.items {
		if f, ok := failed[it.handle]; ok {
			dv := &ua.DataValue{Status: f.status, ServerTimestamp: time.Now()}
			dv.UpdateMask()
			res.snapshot = append(res.snapshot, snapValue{handle: it.handle, dv: dv})
			continue
		}
		node, err := it.resolve(s.ns)
		if err != nil {
			continue // failed above, or the item is on another server's numbering
		}
		idx = append(idx, len(res.snapshot))
		nodes = append(nodes, node)
		res.snapshot = append(res.snapshot, snapValue{handle: it.handle})
	}
	if err := inBatches(len(nodes), s.p.set.BatchSize, func(start, end int) error {
		dvs, err := readValues(ctx, s.c, nodes[start:end])
		if err != nil {
			return err
		}
		for i, dv := range dvs {
			if dv == nil {
				dv = &ua.DataValue{Status: ua.StatusBadNoData}
			}
			res.snapshot[idx[start+i]].dv = dv // each batch its own indices
		}
		return nil
	}); err != nil {
		res.err = fmt.Errorf("read the snapshot: %w", err)
		return res
	}
	res.snapshotted = true
	return res
}

// batchesInFlight bounds the requests a promotion has out at once: enough
// to overlap round trips and the server's work, few enough that a server's
// limits on concurrent requests are not reached.
const batchesInFlight = 4

// inBatches calls f for each batch [start, end) of n elements, up to
// batchesInFlight at once, and returns the first error.
func inBatches(n, size int, f func(start, end int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
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
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
