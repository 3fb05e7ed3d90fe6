package uaserver

import (
	"math"
	"reflect"
	"time"

	"github.com/gopcua/opcua/ua"
)

// uaItem is a monitored item: a node's attribute sampled into a queue that
// its subscription publishes from.
type uaItem struct {
	id            uint32
	sub           *uaSub
	node          *uaNode
	attr          ua.AttributeID
	handle        uint32
	ts            ua.TimestampsToReturn
	mode          ua.MonitoringMode
	qsize         int
	discardOldest bool
	trigger       ua.DataChangeTrigger
	sampling      float64
	queue         []queuedValue
	last          *ua.DataValue // last value queued, for the data change filter
}

type queuedValue struct {
	dv   *ua.DataValue
	size int // encoded MonitoredItemNotification size
}

func (e *uaEngine) reviseSampling(ms float64, sub *uaSub) float64 {
	if math.IsNaN(ms) || ms <= 0 {
		return float64(sub.interval) / float64(time.Millisecond)
	}
	return ms
}

func reviseQueue(q uint32) int {
	return int(min(max(q, 1), maxQueueSize))
}

// parseFilter accepts no filter or a DataChangeFilter without deadband.
func parseFilter(eo *ua.ExtensionObject, attr ua.AttributeID) (ua.DataChangeTrigger, ua.StatusCode) {
	if eo == nil || eo.Value == nil {
		return ua.DataChangeTriggerStatusValue, ua.StatusOK
	}
	f, ok := eo.Value.(*ua.DataChangeFilter)
	switch {
	case !ok:
		return 0, ua.StatusBadMonitoredItemFilterUnsupported
	case attr != ua.AttributeIDValue:
		return 0, ua.StatusBadFilterNotAllowed
	case f.DeadbandType != 0:
		return 0, ua.StatusBadMonitoredItemFilterUnsupported
	case f.Trigger > ua.DataChangeTriggerStatusValueTimestamp:
		return 0, ua.StatusBadMonitoredItemFilterInvalid
	}
	return f.Trigger, ua.StatusOK
}

// batchLocked makes the checks every batch service starts with: a live
// session and a batch of n operations that is neither empty nor over the
// per-operation limit.
func (e *uaEngine) batchLocked(c *uaConn, h *ua.RequestHeader, n, perOp int) (*uaSession, ua.StatusCode) {
	sess, code := e.sessionLocked(h)
	switch {
	case code != ua.StatusOK:
		return nil, code
	case n == 0:
		return nil, ua.StatusBadNothingToDo
	case c.tooManyOps(n, perOp):
		return nil, ua.StatusBadTooManyOperations
	}
	return sess, ua.StatusOK
}

// itemsOpLocked is batchLocked for the monitored-item services, which also
// name a subscription.
func (e *uaEngine) itemsOpLocked(c *uaConn, h *ua.RequestHeader, subID uint32, n, perOp int) (*uaSub, ua.StatusCode) {
	sess, code := e.batchLocked(c, h, n, perOp)
	if code != ua.StatusOK {
		return nil, code
	}
	sub := sess.subs[subID]
	if sub == nil {
		return nil, ua.StatusBadSubscriptionIDInvalid
	}
	return sub, ua.StatusOK
}

func (e *uaEngine) createMonitoredItems(c *uaConn, r *ua.CreateMonitoredItemsRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sub, code := e.itemsOpLocked(c, r.RequestHeader, r.SubscriptionID, len(r.ItemsToCreate), 32)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if r.TimestampsToReturn > ua.TimestampsToReturnNeither {
		return serviceFault(r, ua.StatusBadTimestampsToReturnInvalid)
	}
	now := time.Now()
	results := make([]*ua.MonitoredItemCreateResult, len(r.ItemsToCreate))
	for i, ic := range r.ItemsToCreate {
		results[i] = e.createItemLocked(sub, ic, r.TimestampsToReturn, now)
		if results[i].StatusCode == ua.StatusOK {
			e.itemsCreated.Add(1)
		}
	}
	return &ua.CreateMonitoredItemsResponse{ResponseHeader: respHeader(r, ua.StatusOK), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}
}

func (e *uaEngine) createItemLocked(sub *uaSub, ic *ua.MonitoredItemCreateRequest, ts ua.TimestampsToReturn, now time.Time) *ua.MonitoredItemCreateResult {
	res := &ua.MonitoredItemCreateResult{FilterResult: ua.NewExtensionObject(nil)}
	fail := func(code ua.StatusCode) *ua.MonitoredItemCreateResult {
		res.StatusCode = code
		return res
	}
	if len(sub.items) >= maxItemsPerSub {
		return fail(ua.StatusBadTooManyMonitoredItems)
	}
	if ic == nil || ic.ItemToMonitor == nil || ic.ItemToMonitor.NodeID == nil {
		return fail(ua.StatusBadNodeIDInvalid)
	}
	rv := ic.ItemToMonitor
	n := e.s.space.node(rv.NodeID)
	switch {
	case n == nil:
		return fail(ua.StatusBadNodeIDUnknown)
	case rv.IndexRange != "":
		return fail(ua.StatusBadIndexRangeInvalid)
	case rv.AttributeID == ua.AttributeIDValue && n.value == nil:
		return fail(ua.StatusBadAttributeIDInvalid)
	case ic.MonitoringMode > ua.MonitoringModeReporting:
		return fail(ua.StatusBadMonitoringModeInvalid)
	}
	if rv.AttributeID != ua.AttributeIDValue {
		if _, code := n.attribute(rv.AttributeID); code != ua.StatusOK {
			return fail(ua.StatusBadAttributeIDInvalid)
		}
	}
	params := ic.RequestedParameters
	if params == nil {
		params = &ua.MonitoringParameters{QueueSize: 1, DiscardOldest: true}
	}
	trigger, code := parseFilter(params.Filter, rv.AttributeID)
	if code != ua.StatusOK {
		return fail(code)
	}
	e.nextItem++
	it := &uaItem{
		id:            e.nextItem,
		sub:           sub,
		node:          n,
		attr:          rv.AttributeID,
		handle:        params.ClientHandle,
		ts:            ts,
		mode:          ic.MonitoringMode,
		qsize:         reviseQueue(params.QueueSize),
		discardOldest: params.DiscardOldest,
		trigger:       trigger,
		sampling:      e.reviseSampling(params.SamplingInterval, sub),
	}
	sub.items[it.id] = it
	sub.order = append(sub.order, it)
	set := e.byNode[n]
	if set == nil {
		set = make(map[*uaItem]struct{})
		e.byNode[n] = set
	}
	set[it] = struct{}{}
	if it.mode != ua.MonitoringModeDisabled {
		e.offerLocked(it, n.read(it.attr, ts, now), true)
	}
	res.StatusCode = ua.StatusOK
	res.MonitoredItemID = it.id
	res.RevisedSamplingInterval = it.sampling
	res.RevisedQueueSize = uint32(it.qsize)
	return res
}

func (e *uaEngine) unindexLocked(it *uaItem) {
	if set := e.byNode[it.node]; set != nil {
		delete(set, it)
		if len(set) == 0 {
			delete(e.byNode, it.node)
		}
	}
}

func (e *uaEngine) modifyMonitoredItems(c *uaConn, r *ua.ModifyMonitoredItemsRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sub, code := e.itemsOpLocked(c, r.RequestHeader, r.SubscriptionID, len(r.ItemsToModify), 32)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if r.TimestampsToReturn > ua.TimestampsToReturnNeither {
		return serviceFault(r, ua.StatusBadTimestampsToReturnInvalid)
	}
	results := make([]*ua.MonitoredItemModifyResult, len(r.ItemsToModify))
	for i, m := range r.ItemsToModify {
		res := &ua.MonitoredItemModifyResult{FilterResult: ua.NewExtensionObject(nil)}
		results[i] = res
		var it *uaItem
		if m != nil {
			it = sub.items[m.MonitoredItemID]
		}
		if it == nil {
			res.StatusCode = ua.StatusBadMonitoredItemIDInvalid
			continue
		}
		params := m.RequestedParameters
		if params == nil {
			params = &ua.MonitoringParameters{ClientHandle: it.handle, QueueSize: uint32(it.qsize), DiscardOldest: it.discardOldest}
		}
		trigger, code := parseFilter(params.Filter, it.attr)
		if code != ua.StatusOK {
			res.StatusCode = code
			continue
		}
		it.handle, it.trigger, it.ts = params.ClientHandle, trigger, r.TimestampsToReturn
		it.qsize, it.discardOldest = reviseQueue(params.QueueSize), params.DiscardOldest
		if len(it.queue) > it.qsize {
			it.queue = append([]queuedValue(nil), it.queue[len(it.queue)-it.qsize:]...)
		}
		it.sampling = e.reviseSampling(params.SamplingInterval, sub)
		res.RevisedSamplingInterval, res.RevisedQueueSize = it.sampling, uint32(it.qsize)
	}
	return &ua.ModifyMonitoredItemsResponse{ResponseHeader: respHeader(r, ua.StatusOK), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}
}

func (e *uaEngine) setMonitoringMode(c *uaConn, r *ua.SetMonitoringModeRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sub, code := e.itemsOpLocked(c, r.RequestHeader, r.SubscriptionID, len(r.MonitoredItemIDs), 4)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if r.MonitoringMode > ua.MonitoringModeReporting {
		return serviceFault(r, ua.StatusBadMonitoringModeInvalid)
	}
	now := time.Now()
	results := make([]ua.StatusCode, len(r.MonitoredItemIDs))
	for i, id := range r.MonitoredItemIDs {
		it := sub.items[id]
		if it == nil {
			// gopcua's server dereferenced the missing item here.
			results[i] = ua.StatusBadMonitoredItemIDInvalid
			continue
		}
		old := it.mode
		it.mode = r.MonitoringMode
		switch {
		case it.mode == ua.MonitoringModeDisabled:
			it.queue, it.last = nil, nil
		case old == ua.MonitoringModeDisabled:
			e.offerLocked(it, it.node.read(it.attr, it.ts, now), true)
		}
	}
	return &ua.SetMonitoringModeResponse{ResponseHeader: respHeader(r, ua.StatusOK), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}
}

// setTriggering validates its arguments and reports each link as
// Bad_NotSupported: the server has no triggering.
func (e *uaEngine) setTriggering(c *uaConn, r *ua.SetTriggeringRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sub, code := e.itemsOpLocked(c, r.RequestHeader, r.SubscriptionID, len(r.LinksToAdd)+len(r.LinksToRemove), 4)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if sub.items[r.TriggeringItemID] == nil {
		return serviceFault(r, ua.StatusBadMonitoredItemIDInvalid)
	}
	linkResults := func(ids []uint32) []ua.StatusCode {
		out := make([]ua.StatusCode, len(ids))
		for i, id := range ids {
			out[i] = ua.StatusBadNotSupported
			if sub.items[id] == nil {
				out[i] = ua.StatusBadMonitoredItemIDInvalid
			}
		}
		return out
	}
	return &ua.SetTriggeringResponse{
		ResponseHeader:        respHeader(r, ua.StatusOK),
		AddResults:            linkResults(r.LinksToAdd),
		AddDiagnosticInfos:    []*ua.DiagnosticInfo{},
		RemoveResults:         linkResults(r.LinksToRemove),
		RemoveDiagnosticInfos: []*ua.DiagnosticInfo{},
	}
}

func (e *uaEngine) deleteMonitoredItems(c *uaConn, r *ua.DeleteMonitoredItemsRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sub, code := e.itemsOpLocked(c, r.RequestHeader, r.SubscriptionID, len(r.MonitoredItemIDs), 4)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	results := make([]ua.StatusCode, len(r.MonitoredItemIDs))
	removed := false
	for i, id := range r.MonitoredItemIDs {
		it := sub.items[id]
		if it == nil {
			// gopcua's server dereferenced the missing item here too.
			results[i] = ua.StatusBadMonitoredItemIDInvalid
			continue
		}
		delete(sub.items, id)
		e.unindexLocked(it)
		it.mode, it.queue = ua.MonitoringModeDisabled, nil
		removed = true
	}
	if removed {
		order := sub.order[:0]
		for _, it := range sub.order {
			if sub.items[it.id] == it {
				order = append(order, it)
			}
		}
		clear(sub.order[len(order):])
		sub.order = order
	}
	return &ua.DeleteMonitoredItemsResponse{ResponseHeader: respHeader(r, ua.StatusOK), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}
}

// notify samples the Value of the given nodes for every item that monitors
// them. It only takes the engine lock and appends to queues, so the
// caller (the pair's clock goroutine, a level change, a write) never
// blocks on a client.
func (e *uaEngine) notify(nodes ...*uaNode) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range nodes {
		set := e.byNode[n]
		if len(set) == 0 {
			continue
		}
		// One sample per node, shared read-only by every item that wants
		// both timestamps.
		var sample *ua.DataValue
		for it := range set {
			if it.attr != ua.AttributeIDValue || it.mode == ua.MonitoringModeDisabled {
				continue
			}
			if sample == nil {
				sample = n.read(ua.AttributeIDValue, ua.TimestampsToReturnBoth, now)
			}
			dv := sample
			if it.ts != ua.TimestampsToReturnBoth {
				cp := *sample
				dv = withTimestamps(&cp, it.ts, now)
			}
			e.offerLocked(it, dv, false)
		}
	}
}

// offerLocked queues a sample on an item if the item's data change filter
// passes it (force skips the filter: initial values).
func (e *uaEngine) offerLocked(it *uaItem, dv *ua.DataValue, force bool) {
	if !force && it.last != nil && !changed(it.last, dv, it.trigger) {
		return
	}
	it.last = dv
	q := queuedValue{dv: dv, size: 4 + dataValueSize(dv)}
	if len(it.queue) < it.qsize {
		it.queue = append(it.queue, q)
		return
	}
	e.overflows.Add(1)
	if it.discardOldest {
		it.queue[0] = queuedValue{}
		it.queue = append(it.queue[1:], q)
	} else {
		it.queue[len(it.queue)-1] = q
	}
}

func changed(a, b *ua.DataValue, trigger ua.DataChangeTrigger) bool {
	if a.Status != b.Status {
		return true
	}
	if trigger == ua.DataChangeTriggerStatus {
		return false
	}
	if !variantEqual(a.Value, b.Value) {
		return true
	}
	return trigger == ua.DataChangeTriggerStatusValueTimestamp && !a.SourceTimestamp.Equal(b.SourceTimestamp)
}

func variantEqual(a, b *ua.Variant) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a == b {
		return true
	}
	return reflect.DeepEqual(a.Value(), b.Value())
}

// dataValueSize is the binary size of a DataValue, exact for the types
// this server serves and measured by encoding for anything else.
func dataValueSize(dv *ua.DataValue) int {
	n := 1
	if dv.EncodingMask&ua.DataValueValue != 0 {
		n += variantSize(dv.Value)
	}
	if dv.EncodingMask&ua.DataValueStatusCode != 0 {
		n += 4
	}
	if dv.EncodingMask&ua.DataValueSourceTimestamp != 0 {
		n += 8
	}
	if dv.EncodingMask&ua.DataValueSourcePicoseconds != 0 {
		n += 2
	}
	if dv.EncodingMask&ua.DataValueServerTimestamp != 0 {
		n += 8
	}
	if dv.EncodingMask&ua.DataValueServerPicoseconds != 0 {
		n += 2
	}
	return n
}

func variantSize(v *ua.Variant) int {
	if v == nil {
		return 1
	}
	switch x := v.Value().(type) {
	case bool, int8, uint8:
		return 2
	case int16, uint16:
		return 3
	case int32, uint32, float32, ua.StatusCode:
		return 5
	case int64, uint64, float64, time.Time:
		return 9
	case string:
		return 5 + len(x)
	case []byte:
		return 5 + len(x)
	case []string:
		n := 5
		for _, s := range x {
			n += 4 + len(s)
		}
		return n
	}
	b, err := ua.Encode(v)
	if err != nil {
		return 1 << 20
	}
	return len(b)
}
