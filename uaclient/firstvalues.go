package uaclient

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gopcua/opcua/ua"
)

// firstValues collects, while a promotion builds its snapshot, the first
// data notification of each item on the promoted session. Part 4 has a
// server report an item's first sample as soon as possible once the item
// is created enabled or turned from Disabled to Reporting, so those
// samples are the current values the snapshot needs: taking them spares
// the server a Read of every item, which costs as much again as the
// notifications (on node-opcua about 0.1 ms per item). The publishers
// add to it; the worker waits on it.
type firstValues struct {
	mu      sync.Mutex
	vals    map[uint32]*ua.DataValue // nil: not collecting
	arrived chan struct{}            // closed and replaced when values arrive
}

// start begins collecting, forgetting what an earlier promotion collected.
func (f *firstValues) start() {
	f.mu.Lock()
	f.vals = map[uint32]*ua.DataValue{}
	f.arrived = make(chan struct{})
	f.mu.Unlock()
}

// stop ends collecting; a batch still waiting gets what it has.
func (f *firstValues) stop() {
	f.mu.Lock()
	f.vals = nil
	if f.arrived != nil {
		close(f.arrived)
		f.arrived = nil
	}
	f.mu.Unlock()
}

// add keeps the first value of each item in notes, if collecting.
func (f *firstValues) add(notes []dataNote) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.vals == nil || len(notes) == 0 {
		return
	}
	for _, n := range notes {
		if _, ok := f.vals[n.handle]; !ok {
			f.vals[n.handle] = n.dv
		}
	}
	close(f.arrived)
	f.arrived = make(chan struct{})
}

// await waits until every handle has a value, or until ctx ends, or
// until no item has had its first sample for wait once sent has closed,
// and returns the values it has: a handle without one is missing. A server
// busy with requests may hold its publish responses back until it has
// answered them, so the wait starts once every request of the promotion
// has been answered; a server that sends thousands of first samples in
// capped responses takes several cycles, so each new item's sample starts
// the wait again.
func (f *firstValues) await(ctx context.Context, handles []uint32, sent <-chan struct{}, wait time.Duration) map[uint32]*ua.DataValue {
	var timer *time.Timer
	var expire <-chan time.Time
	seen := -1
	got := make(map[uint32]*ua.DataValue, len(handles))
	// Each wake-up looks only at the handles still missing: the counters
	// of the items already in wake it for every data message.
	missing := slices.Clone(handles)
	for {
		f.mu.Lock()
		rest := missing[:0]
		for _, h := range missing {
			if dv, ok := f.vals[h]; ok {
				got[h] = dv
			} else {
				rest = append(rest, h)
			}
		}
		missing = rest
		arrived, total := f.arrived, len(f.vals)
		f.mu.Unlock()
		if len(missing) == 0 || arrived == nil {
			return got
		}
		if timer != nil && total > seen {
			timer.Reset(wait)
		}
		seen = total
		select {
		case <-arrived:
		case <-sent:
			timer = time.NewTimer(wait)
			defer timer.Stop()
			expire, sent = timer.C, nil
		case <-expire:
			return got
		case <-ctx.Done():
			return got
		}
	}
}

// firstValuesWait is how long a batch waits for the next first sample
// before it reads the items still missing: samples leave with the next
// publishing cycle, so two cycles and a margin for a busy server.
func firstValuesWait(publishingInterval time.Duration) time.Duration {
	return 2*publishingInterval + 200*time.Millisecond
}
