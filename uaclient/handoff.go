package uaclient

import (
	"cmp"
	"slices"
)

// Handoff is what a successor of the Pair (the same relay restarted) needs
// to take the serving session's data subscription over instead of
// creating a new one: the server's subscription IDs, the first data
// message not acknowledged (every one before it was stored, with
// WithAckAfterStore), and the monitored items it holds, to reconcile
// with. Nothing in it is secret: a subscription moves only to a session
// of the same user (TransferSubscriptions), whose credentials are the
// successor's own.
type Handoff struct {
	// URL and Endpoint name the server and its role in the pair.
	URL      string `json:"url"`
	Endpoint string `json:"endpoint"`
	// HealthSub and DataSub are the server's subscription IDs.
	HealthSub uint32 `json:"healthSubscription"`
	DataSub   uint32 `json:"dataSubscription"`
	// NextUnacked is the data subscription's first sequence number not
	// acknowledged: a successor asks for it and what follows again
	// (Republish).
	NextUnacked uint32 `json:"nextUnacked"`
	// Items are the data subscription's monitored items, by client
	// handle.
	Items []HandoffItem `json:"items"`
}

// HandoffItem is one monitored item of the data subscription.
type HandoffItem struct {
	Handle uint32 `json:"handle"`
	ID     uint32 `json:"id"`
	Node   string `json:"node"`
}

// itemsOf lists a worker's items, by handle: what it posts with each
// reconciliation, for the Handoff.
func itemsOf(have map[uint32]*monItem) []HandoffItem {
	out := make([]HandoffItem, 0, len(have))
	for h, m := range have {
		out = append(out, HandoffItem{Handle: h, ID: m.id, Node: m.spec.node.String()})
	}
	slices.SortFunc(out, func(a, b HandoffItem) int { return cmp.Compare(a.Handle, b.Handle) })
	return out
}

// recordHandoff tells the recorder (WithHandoffRecorder) what a successor
// needs now, when it changed: the serving session's subscriptions, how far
// they are acknowledged and its items.
func (p *Pair) recordHandoff() {
	f, s := p.opt.onHandoff, p.serving
	if f == nil || s == nil || s.dead() || !s.serves() {
		return
	}
	sb := s.subs[s.conn.dataSub]
	if sb == nil {
		return
	}
	h := Handoff{URL: s.conn.url, Endpoint: s.ep.String(), HealthSub: s.conn.healthSub, DataSub: s.conn.dataSub,
		NextUnacked: sb.acked, Items: s.items}
	last := p.handoff
	if last.URL == h.URL && last.HealthSub == h.HealthSub && last.DataSub == h.DataSub && last.NextUnacked == h.NextUnacked &&
		slices.Equal(last.Items, h.Items) {
		return
	}
	p.handoff = h
	f(h)
}
