package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/gopcua/opcua/ua"
)

// slRecorder is the consumer: it checks the counters for lost and
// repeated ticks, and notes when Good values arrive from each endpoint.
type slRecorder struct {
	mu       sync.Mutex
	counters map[uint32]bool
	// independent: the two servers count on their own, so a counter's
	// value says nothing about lost or repeated ticks across a switch.
	independent bool
	last        map[uint32]int64
	lastSt      map[uint32]ua.StatusCode
	lost        uint64
	dup         uint64
	// outOfOrder counts data changes older in source time than the tag's
	// last one; bad counts the counters' values that were not Good.
	lastSrc    map[uint32]time.Time
	outOfOrder uint64
	bad        uint64
	// Good values of tag 0 (a counter) for the gap.
	lastGood, gapFrom time.Time
	maxGap            time.Duration
	// The first Good value from each endpoint after mark.
	mark         time.Time
	firstGood    [2]time.Time
	firstRefresh [2]time.Time // the first Good value of a snapshot
	refreshEnd   [2]time.Time // the end of the first snapshot after mark
	framed       bool         // the subject frames snapshots (refresh ends); the poll-based client does not
	// The first ServiceLevel sample of the primary.
	firstSample time.Time
	switches    int
	causes      map[string]int
	// recovered is when the primary's link recovered after the mark
	// (uaclient.EventLinkRecovered); republished sums what the
	// recoveries asked the server for again.
	recovered   time.Time
	recoveries  int
	republished int
	lostLinks   int // the primary's sessions lost after the mark
	// stays counts the Policy's decisions to stay after the mark (a probe
	// found the standby wanting); rise is when the scenario's script
	// raised the standby's level, zero if it did not.
	stays   int
	rise    time.Time
	changed chan struct{}
	// counterValues counts the counter values each endpoint delivered.
	counterValues [2]int
}

func newSLRecorder(tags []uaserver.Tag) *slRecorder {
	r := &slRecorder{counters: map[uint32]bool{}, last: map[uint32]int64{}, lastSt: map[uint32]ua.StatusCode{},
		lastSrc: map[uint32]time.Time{}, causes: map[string]int{}, changed: make(chan struct{}, 1)}
	for i, t := range tags {
		if t.Kind == uaserver.TagCounter {
			r.counters[uint32(i)] = true
		}
	}
	return r
}

func (r *slRecorder) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// value records one value; refresh values reconcile (a value already seen
// is not a duplicate), data changes must each be new: an older tick, or the
// same tick with the same status again, is a duplicate (the same tick with
// another status is a status change, as when a server turns its data
// Bad_OutOfService).
func (r *slRecorder) value(ep servicelevel.Endpoint, h uint32, dv *ua.DataValue, refresh bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	good := dv != nil && dv.Status == ua.StatusOK
	if good && !r.mark.IsZero() && now.After(r.mark) {
		if r.firstGood[ep].IsZero() {
			r.firstGood[ep] = now
		}
		if refresh && r.firstRefresh[ep].IsZero() {
			r.firstRefresh[ep] = now
		}
	}
	if h == 0 && good {
		if !r.lastGood.IsZero() && now.Sub(r.lastGood) > r.maxGap && !r.lastGood.Before(r.gapFrom) {
			r.maxGap = now.Sub(r.lastGood)
		}
		r.lastGood = now
	}
	if dv != nil && !dv.SourceTimestamp.IsZero() {
		// A snapshot may repeat an older value; a data change may not.
		if last := r.lastSrc[h]; !refresh && dv.SourceTimestamp.Before(last) {
			r.outOfOrder++
		}
		if dv.SourceTimestamp.After(r.lastSrc[h]) {
			r.lastSrc[h] = dv.SourceTimestamp
		}
	}
	if r.counters[h] && dv != nil && !good {
		r.bad++
	}
	if r.counters[h] && !r.independent && dv != nil && dv.Value != nil {
		if v, ok := uaCounter(dv.Value.Value()); ok {
			r.counterValues[ep]++
			last, seen := r.last[h]
			switch {
			case !seen:
			case v > last+1:
				r.lost += uint64(v - last - 1)
			case !refresh && (v < last || v == last && dv.Status == r.lastSt[h]):
				r.dup++
			}
			if !seen || v >= last {
				r.last[h], r.lastSt[h] = v, dv.Status
			}
		}
	}
	r.poke()
}

// uaCounter returns a counter's value: an Int64 on uaserver's
// servers, an Int32 on node-opcua's.
func uaCounter(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	}
	return 0, false
}

// refreshDone notes the end of a snapshot of ep: every tag's value is
// with the consumer again.
func (r *slRecorder) refreshDone(ep servicelevel.Endpoint) {
	now := time.Now()
	r.mu.Lock()
	r.framed = true
	if !r.mark.IsZero() && now.After(r.mark) && r.refreshEnd[ep].IsZero() {
		r.refreshEnd[ep] = now
	}
	r.mu.Unlock()
	r.poke()
}

func (r *slRecorder) failover(cause string) {
	r.mu.Lock()
	r.switches++
	r.causes[cause]++
	r.mu.Unlock()
	r.poke()
}

func (r *slRecorder) linkLost() { r.countAfterMark(&r.lostLinks) }

func (r *slRecorder) stay() { r.countAfterMark(&r.stays) }

// countAfterMark counts an event into n once the fault's mark is past:
// the events of the run's start are not the fault's.
func (r *slRecorder) countAfterMark(n *int) {
	r.mu.Lock()
	if !r.mark.IsZero() && time.Now().After(r.mark) {
		(*n)++
	}
	r.mu.Unlock()
	r.poke()
}

// risen notes when the script raised the standby's level: taken before
// the level is set, so that a time from it includes the setting.
func (r *slRecorder) risen(at time.Time) {
	r.mu.Lock()
	r.rise = at
	r.mu.Unlock()
}

func (r *slRecorder) linkRecovered(republished int) {
	now := time.Now()
	r.mu.Lock()
	if !r.mark.IsZero() && now.After(r.mark) && r.recovered.IsZero() {
		r.recovered = now
	}
	r.recoveries++
	r.republished += republished
	r.mu.Unlock()
	r.poke()
}

// waitBack waits until the primary carries the data again after the
// mark: its link recovered, or a snapshot from a new session. A link that
// is back (down closed) without having been lost (a freeze shorter than
// the heartbeat gap) counts from when it was back, once a second has shown
// that no loss follows.
func (r *slRecorder) waitBack(ctx context.Context, down <-chan struct{}) (time.Time, error) {
	var at, back time.Time
	err := r.await(ctx, func() bool {
		if back.IsZero() {
			select {
			case <-down:
				back = time.Now()
			default:
			}
		}
		if !back.IsZero() && r.lostLinks == 0 && time.Since(back) > time.Second {
			at = back
			return true
		}
		at = r.recovered
		if f := r.firstRefresh[servicelevel.Primary]; at.IsZero() || !f.IsZero() && f.Before(at) {
			at = f
		}
		if at.IsZero() && r.switches > 0 {
			at = time.Now() // a switch: the switches column says so
		}
		return !at.IsZero()
	})
	if err != nil {
		return at, fmt.Errorf("the primary did not come back: %w", err)
	}
	return at, nil
}

func (r *slRecorder) sample() {
	r.mu.Lock()
	if r.firstSample.IsZero() {
		r.firstSample = time.Now()
	}
	r.mu.Unlock()
	r.poke()
}

func (r *slRecorder) setMark(t time.Time) {
	r.mu.Lock()
	r.mark = t
	r.firstGood = [2]time.Time{}
	r.firstRefresh = [2]time.Time{}
	r.refreshEnd = [2]time.Time{}
	r.mu.Unlock()
}

// await waits until done, called with r.mu held, reports true.
func (r *slRecorder) await(ctx context.Context, done func() bool) error {
	for {
		r.mu.Lock()
		ok := done()
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-r.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitGood waits for a Good value from ep after the mark, from a snapshot
// if refresh is set.
func (r *slRecorder) waitGood(ctx context.Context, ep servicelevel.Endpoint, refresh bool) (time.Time, error) {
	var at time.Time
	err := r.await(ctx, func() bool {
		at = r.firstGood[ep]
		if refresh {
			at = r.firstRefresh[ep]
		}
		return !at.IsZero()
	})
	if err != nil {
		return at, fmt.Errorf("no Good value from the %s: %w", ep, err)
	}
	return at, nil
}

func (r *slRecorder) waitFirstSample(ctx context.Context) (time.Time, error) {
	var at time.Time
	if err := r.await(ctx, func() bool { at = r.firstSample; return !at.IsZero() }); err != nil {
		return at, fmt.Errorf("no ServiceLevel sample: %w", err)
	}
	return at, nil
}
