package uaclient

import (
	"cmp"
	"fmt"
	"slices"
	"time"
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
	// is 0 while nothing may be taken over: the Pair has just switched
	// to Endpoint (a failover, or a new subscription replacing a lost
	// one) and its new subscription's first message after the snapshot
	// is not stored yet. A successor given such a handoff starts on
	// Endpoint with new subscriptions and a snapshot (a fallback).
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
}

func (a HandoffItem) same(b HandoffItem) bool {
	return a.Handle == b.Handle && a.ID == b.ID && a.Node == b.Node && a.SamplingMs == b.SamplingMs &&
		a.QueueSize == b.QueueSize && a.DiscardOldest == b.DiscardOldest && a.Filter.same(b.Filter)
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
