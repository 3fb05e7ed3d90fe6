package uaclient

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gopcua/opcua/ua"
)

// Handoff is what a successor of the Pair (the same relay restarted) needs
// to take the serving session's data subscription over instead of
// creating a new one: the server's subscription IDs, the first data
// message not acknowledged (every one before it was stored, with
// WithAckAfterStore), the data subscription's parameters and the
// monitored items it holds, with every setting they were created with, to
// reconcile with (an item whose settings are unknown would be deleted and
// created again, and lose its queue). Nothing in it is secret: a
// subscription moves only to a session of the same user
// (TransferSubscriptions), whose credentials are the successor's own.
// WithTakeover gives one to the successor.
type Handoff struct {
	// URL and Endpoint name the server and its role in the pair.
	URL      string `json:"url"`
	Endpoint string `json:"endpoint"`
	// HealthSub and DataSub are the server's subscription IDs. DataSub
	// is 0 while nothing may be taken over: the Pair is switching to
	// Endpoint (a failover, or a new subscription replacing a lost one)
	// and has not yet read its snapshot. A successor given such a handoff
	// starts on Endpoint with new subscriptions and a snapshot (a
	// fallback).
	HealthSub uint32 `json:"healthSubscription"`
	DataSub   uint32 `json:"dataSubscription"`
	// NextUnacked is the data subscription's first sequence number not
	// acknowledged: a successor asks for it and what follows again
	// (Republish).
	NextUnacked uint32 `json:"nextUnacked"`
	// DataIntervalMs, DataLifetimeCount and DataKeepAliveCount are the
	// data subscription's parameters as the server revised them: how
	// long it outlives its session without Publish requests.
	DataIntervalMs     float64 `json:"dataIntervalMs,omitempty"`
	DataLifetimeCount  uint32  `json:"dataLifetimeCount,omitempty"`
	DataKeepAliveCount uint32  `json:"dataKeepAliveCount,omitempty"`
	// Items are the data subscription's monitored items, by client
	// handle.
	Items []HandoffItem `json:"items"`
}

// HandoffItem is one monitored item of the data subscription, with the
// settings it was created with.
type HandoffItem struct {
	Handle uint32 `json:"handle"`
	ID     uint32 `json:"id"`
	Node   string `json:"node"`
	// SamplingMs is the sampling interval asked for, in milliseconds.
	SamplingMs    float64           `json:"samplingMs"`
	QueueSize     uint32            `json:"queueSize"`
	DiscardOldest bool              `json:"discardOldest"`
	Filter        *DataChangeFilter `json:"filter,omitempty"`
	// Fence, set while the data subscription's first messages may
	// predate the snapshot stored at a switch, is the snapshot's value of
	// the item: a successor that asks for those messages again drops the
	// item's data changes up to it, as the Pair did.
	Fence *ItemFence `json:"fence,omitempty"`
}

// ItemFence is a snapshot's value of an item, as far as a successor needs
// it to tell an older data change: its source time and status.
type ItemFence struct {
	SourceTime time.Time `json:"sourceTime"`
	Status     uint32    `json:"status"`
}

func (a HandoffItem) same(b HandoffItem) bool {
	return a.Handle == b.Handle && a.ID == b.ID && a.Node == b.Node && a.SamplingMs == b.SamplingMs &&
		a.QueueSize == b.QueueSize && a.DiscardOldest == b.DiscardOldest && a.Filter.same(b.Filter) &&
		(a.Fence == nil) == (b.Fence == nil) && (a.Fence == nil || *a.Fence == *b.Fence)
}

// fencedItems returns items with each one's value in the snapshot fence,
// where it has one with a source time.
func fencedItems(items []HandoffItem, fence map[uint32]*ua.DataValue) []HandoffItem {
	out := slices.Clone(items)
	for i := range out {
		if f := fence[out[i].Handle]; f != nil && !f.SourceTimestamp.IsZero() {
			out[i].Fence = &ItemFence{SourceTime: f.SourceTimestamp, Status: uint32(f.Status)}
		}
	}
	return out
}

// withoutFences returns items without their fences: a successor's own
// records carry the fences of its own switches only.
func withoutFences(items []HandoffItem) []HandoffItem {
	out := slices.Clone(items)
	for i := range out {
		out[i].Fence = nil
	}
	return out
}

// fenceOf is the fence a successor keeps from a handoff's items.
func fenceOf(items []HandoffItem) map[uint32]*ua.DataValue {
	var fence map[uint32]*ua.DataValue
	for _, it := range items {
		if it.Fence == nil {
			continue
		}
		if fence == nil {
			fence = map[uint32]*ua.DataValue{}
		}
		fence[it.Handle] = &ua.DataValue{SourceTimestamp: it.Fence.SourceTime, Status: ua.StatusCode(it.Fence.Status)}
	}
	return fence
}

// itemsOf lists a worker's items, by handle: what it posts with each
// reconciliation, for the Handoff.
func itemsOf(have map[uint32]*monItem) []HandoffItem {
	out := make([]HandoffItem, 0, len(have))
	for h, m := range have {
		it := HandoffItem{Handle: h, ID: m.id, Node: m.spec.node.String(), SamplingMs: msFloat(m.spec.sampling),
			QueueSize: m.spec.queue, DiscardOldest: m.spec.discardOldest}
		if f := m.spec.filter; f != nil {
			c := *f
			it.Filter = &c
		}
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b HandoffItem) int { return cmp.Compare(a.Handle, b.Handle) })
	return out
}

// spec is the item as the Pair monitors it, rebuilt from the handoff.
func (it HandoffItem) spec() (itemSpec, error) {
	node, err := ParseNodeID(it.Node)
	if err != nil {
		return itemSpec{}, fmt.Errorf("item %d: node ID %q: %w", it.Handle, it.Node, err)
	}
	s := itemSpec{handle: it.Handle, node: node, sampling: time.Duration(it.SamplingMs * float64(time.Millisecond)),
		queue: it.QueueSize, discardOldest: it.DiscardOldest}
	if it.Filter != nil {
		if err := it.Filter.Validate("filter"); err != nil {
			return itemSpec{}, fmt.Errorf("item %d: %w", it.Handle, err)
		}
		f := *it.Filter
		s.filter = &f
	}
	return s, nil
}
