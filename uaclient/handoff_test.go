package uaclient_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua/ua"
)

// handoffStore keeps the handoffs a Pair records as a relay's stores do:
// the latest in memory, written (durable) every write interval by a
// writer of its own, or at once by the sync.
type handoffStore struct {
	mu      sync.Mutex
	latest  uaclient.Handoff
	durable uaclient.Handoff
	syncs   int
	// named is the first handoff that named each endpoint's subscription.
	named map[string]uaclient.Handoff
	// bad collects what the data handler saw delivered while the durable
	// record named another endpoint's subscription.
	bad []string

	stop chan struct{}
	done chan struct{}
}

func newHandoffStore(t *testing.T) *handoffStore {
	hs := &handoffStore{named: map[string]uaclient.Handoff{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(hs.done)
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-hs.stop:
				return
			case <-tk.C:
				hs.mu.Lock()
				hs.durable = hs.latest
				hs.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(hs.stop); <-hs.done })
	return hs
}

func (hs *handoffStore) record(h uaclient.Handoff) {
	hs.mu.Lock()
	hs.latest = h
	if _, ok := hs.named[h.Endpoint]; !ok && h.DataSub != 0 {
		hs.named[h.Endpoint] = h
	}
	hs.mu.Unlock()
}

func (hs *handoffStore) sync(context.Context) error {
	hs.mu.Lock()
	hs.durable = hs.latest
	hs.syncs++
	hs.mu.Unlock()
	return nil
}

func (hs *handoffStore) state() (durable uaclient.Handoff, syncs int, bad []string) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.durable, hs.syncs, append([]string(nil), hs.bad...)
}

// check, on the data handler, notes an update of ep delivered while a
// successor would take another endpoint's subscription over.
func (hs *handoffStore) check(u uaclient.Update) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if d := hs.durable; d.DataSub != 0 && d.Endpoint != u.Endpoint.String() {
		hs.bad = append(hs.bad, u.Kind.String()+" of the "+u.Endpoint.String()+" while the record names the "+
			d.Endpoint+"'s subscription")
	}
}

// TestPairHandoffAtSwitch: at a failover, the handoff stops naming the
// old active's data subscription, durably, before anything of the new
// active is delivered: a successor that took the old subscription over
// would store the values the server still held for it after the newer
// ones the new active gave. Once the new subscription's first message
// after the snapshot is stored, the handoff names it. The control: before
// the failover the record named the primary's subscription, and the
// delivery checked against it.
func TestPairHandoffAtSwitch(t *testing.T) {
	hs := newHandoffStore(t)
	r := newRig(t, rigOption{levels: [2]byte{250, 240}, onData: hs.check,
		opts: []uaclient.PairOption{uaclient.WithHandoffRecorder(hs.record), uaclient.WithHandoffSync(hs.sync),
			uaclient.WithAckAfterStore(func(done func()) { done() })}})
	var primarySub uint32
	r.waitStatus("the primary's subscription recorded", func(uaclient.PairStatus) bool {
		d, _, _ := hs.state()
		primarySub = d.DataSub
		return d.Endpoint == "primary" && d.DataSub != 0 && d.NextUnacked > 1
	})
	m := r.mark()
	r.waitUpdates(m, 3, "data from the primary under its record", dataFrom(servicelevel.Primary))

	r.servers.A().Kill()
	r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
	r.waitUpdates(m, 3*testTags, "data from the backup", dataFrom(servicelevel.Backup))
	r.waitStatus("the backup's subscription recorded", func(uaclient.PairStatus) bool {
		d, _, _ := hs.state()
		return d.Endpoint == "backup" && d.DataSub != 0
	})
	d, syncs, bad := hs.state()
	if syncs == 0 {
		t.Error("the switch never waited for its record")
	}
	if len(bad) > 0 {
		t.Errorf("%d updates delivered while a successor would take another subscription over, first: %s", len(bad), bad[0])
	}
	if d.DataSub == primarySub && d.URL == r.servers.A().Endpoint() {
		t.Errorf("the record still names the primary's subscription: %+v", d)
	}
	// The new subscription's first message holds the items' initial
	// values, sampled before the snapshot's read: a successor that asks
	// for it again must drop those older than the snapshot's, by the
	// fences the record carries until it is stored.
	hs.mu.Lock()
	first := hs.named["backup"]
	hs.mu.Unlock()
	fenced := 0
	for _, it := range first.Items {
		if it.Fence != nil {
			fenced++
		}
	}
	if first.NextUnacked < 2 && fenced != testTags {
		t.Errorf("the backup's subscription was named from %d on, before its first message after the snapshot, with %d of %d items fenced",
			first.NextUnacked, fenced, testTags)
	}
	for _, it := range d.Items {
		if it.Fence != nil && d.NextUnacked > 2 {
			t.Errorf("item %d still fenced in a record from %d on", it.Handle, d.NextUnacked)
		}
	}
	t.Logf("primary subscription %d; backup subscription %d named first from %d on (%d items fenced), now from %d on; %d syncs",
		primarySub, d.DataSub, first.NextUnacked, fenced, d.NextUnacked, syncs)
}

// TestPairTakeoverOfASwitch: a successor given a handoff recorded at a
// switch (no subscription) starts on the endpoint the predecessor had
// switched to, as its active, with new subscriptions and a snapshot, and
// counts the takeover as a fallback, once. The control for the start: a
// Pair without a takeover starts on the primary.
func TestPairTakeoverOfASwitch(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240},
		optsFor: func(s *uaserver.Pair) []uaclient.PairOption {
			return []uaclient.PairOption{uaclient.WithTakeover(uaclient.Handoff{URL: s.B().Endpoint(), Endpoint: "backup", HealthSub: 7})}
		}})
	st := r.pair.Status()
	if st.Active != servicelevel.Backup || st.SuccessorFallbacks != 1 || st.SuccessorTransfers != 0 {
		t.Fatalf("status: active %v, %d fallbacks, %d transfers; want the backup, 1, 0", st.Active, st.SuccessorFallbacks, st.SuccessorTransfers)
	}
	tk := r.eventsSince(mark{}, uaclient.EventTakeover)
	if len(tk) != 1 || tk[0].Transferred || tk[0].Endpoint != servicelevel.Backup || tk[0].Err == nil {
		t.Fatalf("takeover events: %+v", tk)
	}
	// The first refresh is the backup's, whole (a value of every item).
	// Not r.snapshots' framing: a desire renewed while the snapshot is
	// read repeats its values in the same refresh, which is not what
	// this test is about.
	var start *uaclient.Update
	values := map[uint32]bool{}
	r.waitUpdates(mark{}, 1, "the first refresh's end", func(u uaclient.Update) bool { return u.Kind == uaclient.UpdateRefreshEnd })
	for _, u := range r.updatesSince(mark{}) {
		if u.Kind == uaclient.UpdateRefreshStart && start == nil {
			start = &u
		}
		if u.Kind == uaclient.UpdateRefreshValue && start != nil && u.Epoch == start.Epoch {
			values[u.Handle] = true
		}
		if u.Kind == uaclient.UpdateRefreshEnd {
			break
		}
	}
	if start == nil || start.Endpoint != servicelevel.Backup || len(values) != testTags {
		t.Fatalf("the first refresh: %+v, values of %d of %d items", start, len(values), testTags)
	}

	control := newRig(t, rigOption{levels: [2]byte{250, 240}})
	if a := control.pair.Status().Active; a != servicelevel.Primary {
		t.Fatalf("control: a Pair without a takeover starts on the %v", a)
	}
}

// TestPairSuccessorKeepsTheSwitchFence: a predecessor killed between its
// snapshot and the storing of its subscription's first message after it
// leaves a record that names the subscription from message 1 on, with the
// snapshot's values as fences. The first message holds the items' initial
// values, sampled before the snapshot's read; a successor that takes the
// subscription over and asks for it again drops them, as the predecessor
// did: nothing it relays is as old as what the snapshot stored. The
// control: the same record without its fences relays them again.
func TestPairSuccessorKeepsTheSwitchFence(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "fenced", false: "control"}[fenced], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			servers, err := uaserver.StartPair(ctx, uaserver.WithTags(testTags))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(servers.Close)
			cfg := uaclient.PairConfig{Endpoints: []string{servers.A().Endpoint()}, QueueSize: new(10)}
			var items []uaclient.Item
			for i, tag := range servers.Tags()[:testTags] {
				items = append(items, uaclient.Item{Handle: uint32(i), NodeID: tag.NodeID().String()})
			}
			start := func(opts ...uaclient.PairOption) *uaclient.Pair {
				t.Helper()
				p, err := uaclient.NewPair(cfg, append([]uaclient.PairOption{uaclient.WithLogger(testutil.Logger(t)),
					uaclient.WithKeepSubscriptionAtClose()}, opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				if _, err := p.AddItems(ctx, items); err != nil {
					t.Fatal(err)
				}
				if err := p.Start(ctx); err != nil {
					t.Fatal(err)
				}
				return p
			}

			// The predecessor stores nothing: the server keeps every data
			// message, and the record stays the snapshot's.
			hs := newHandoffStore(t)
			first := start(uaclient.WithHandoffRecorder(hs.record), uaclient.WithAckAfterStore(func(func()) {}))
			var h uaclient.Handoff
			testutil.WaitFor(t, "the subscription named, the server holding 3 messages", waitLong, func() bool {
				hs.mu.Lock()
				h = hs.latest
				hs.mu.Unlock()
				for _, sub := range servers.A().Subscriptions() {
					if sub.ID == h.DataSub && len(sub.Retained) >= 3 && sub.Retained[0] == 1 {
						return true
					}
				}
				return false
			})
			first.Close()
			if h.NextUnacked != 1 || len(fenceOf(h.Items)) != testTags {
				t.Fatalf("the record from %d on fences %d of %d items", h.NextUnacked, len(fenceOf(h.Items)), testTags)
			}
			fence := fenceOf(h.Items)
			if !fenced {
				for i := range h.Items {
					h.Items[i].Fence = nil
				}
			}

			var mu sync.Mutex
			var old, data int
			second := start(uaclient.WithTakeover(h), uaclient.WithDataHandler(func(u uaclient.Update) {
				if u.Kind != uaclient.UpdateData {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				data++
				if f := fence[u.Handle]; f != nil && !u.Value.SourceTimestamp.After(f.SourceTimestamp) {
					old++
				}
			}))
			testutil.WaitFor(t, "the successor relaying", waitLong, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return data >= 3*testTags
			})
			if st := second.Status(); st.SuccessorTransfers != 1 {
				t.Fatalf("%d transfers, %d fallbacks", st.SuccessorTransfers, st.SuccessorFallbacks)
			}
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%d data changes relayed by the successor, %d of them no newer than the predecessor's snapshot", data, old)
			if fenced && old != 0 {
				t.Errorf("the successor relayed %d values no newer than the predecessor's snapshot", old)
			}
			if !fenced && old == 0 {
				t.Error("control: without the fences the successor relayed nothing older: the test proves nothing")
			}
		})
	}
}

// fenceOf is the fence a record's items carry, by handle.
func fenceOf(items []uaclient.HandoffItem) map[uint32]*ua.DataValue {
	out := map[uint32]*ua.DataValue{}
	for _, it := range items {
		if it.Fence != nil {
			out[it.Handle] = &ua.DataValue{SourceTimestamp: it.Fence.SourceTime}
		}
	}
	return out
}
