package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/apbridge/apbridge/wire"
)

// relay-restart's check is by identity, as the fleet soak's: a relay
// numbers its updates per process, so a restarted relay's numbers start
// over, but a counter tag's values run on whatever process published
// them. In the stream (or at the subscriber, with --sink core) each
// counter's values must run without a hole, once each, in order.
//
// A hole inside one relay process (the same Apb-Epoch on both sides) is
// judged by the relay's per-tag sequence numbers (Apb-Seq), as the fleet
// soak judges one: as many values as numbers are missing between the two
// are lost (the relay had them); the rest the source never delivered
// (source_values_skipped). A server that samples a 10 Hz counter every
// 100 ms skips a tick now and then: its sampling timer and the counter's
// drift against each other, and a sample that comes late finds two ticks
// (node-opcua samples with one setInterval, the tags count with another).

// rrObs is one update of relay-restart as stored (or received): where it
// is in the stream and when it got there.
type rrObs struct {
	subject string
	// value is the counter's value; counter says the tag is a counter
	// and the value an integer.
	value   int64
	counter bool
	status  wire.StatusCode
	// refresh: the update belongs to a snapshot refresh (the header
	// Apb-Refresh: true).
	refresh bool
	at      time.Time // stored (the stream) or received (the subscriber)
	// epoch and seq are the update's Apb-Epoch (the publishing process)
	// and Apb-Seq (its number of the tag's updates); "" and 0 if absent.
	epoch string
	seq   uint64
}

// rrRestart is one run's kill and restart.
type rrRestart struct {
	killAt, restartAt time.Time
}

// rrAudit is what the check found.
type rrAudit struct {
	Counted, Lost, Duplicated, Reordered uint64
	// LostByRun are the values lost in a hole across each run's kill and
	// restart; LostSteady those lost in a hole no restart explains.
	LostByRun  []uint64
	LostSteady uint64
	// Skipped are the values missing in a hole inside one relay process
	// beyond its missing sequence numbers: the relay numbered every update
	// it had, so the source never delivered them. Not in Lost.
	Skipped         uint64
	SkippedExamples []string
	// LostPublished are the lost values the subscriber saw published:
	// the relay had them and the stream does not.
	LostPublished uint64
	LostExamples  []string
}

// rrAuditCounters checks the counters' values in obs (in stream order):
// a value seen again (in the same status) is a duplicate, a value below
// the tag's largest so far is reordered, and a value missing between the
// smallest and the largest seen is lost, charged to the run whose kill
// falls between the stored values around the hole, unless one relay
// process published both sides and its sequence numbers run on: then
// it is skipped at the source. published, if not
// nil, says whether the subscriber saw a counter value published.
func rrAuditCounters(obs []rrObs, runs []rrRestart, published func(subject string, v int64) bool) rrAudit {
	type valueStatus struct {
		v      int64
		status wire.StatusCode
	}
	type entry struct {
		v     int64
		at    time.Time
		epoch string
		seq   uint64
	}
	type tagState struct {
		max     int64
		seen    map[valueStatus]bool
		entries []entry
	}
	a := rrAudit{LostByRun: make([]uint64, len(runs))}
	tags := map[string]*tagState{}
	for _, o := range obs {
		if !o.counter {
			continue
		}
		t := tags[o.subject]
		if t == nil {
			t = &tagState{max: math.MinInt64, seen: map[valueStatus]bool{}}
			tags[o.subject] = t
		}
		vs := valueStatus{o.value, o.status}
		if t.seen[vs] {
			a.Duplicated++
			continue
		}
		t.seen[vs] = true
		if o.value < t.max {
			a.Reordered++
		}
		t.max = max(t.max, o.value)
		t.entries = append(t.entries, entry{o.value, o.at, o.epoch, o.seq})
		a.Counted++
	}
	for _, subject := range slices.Sorted(maps.Keys(tags)) {
		es := tags[subject].entries
		slices.SortStableFunc(es, func(x, y entry) int {
			switch {
			case x.v < y.v:
				return -1
			case x.v > y.v:
				return 1
			}
			return 0
		})
		for i := 1; i < len(es); i++ {
			x, y := es[i-1], es[i]
			missing := y.v - x.v - 1
			if missing <= 0 {
				continue // the same value in another status, or no hole
			}
			if x.epoch != "" && x.epoch == y.epoch && x.seq > 0 && y.seq > x.seq {
				// One process on both sides: it numbered every update
				// it had, so what its numbers do not cover it never had.
				if had := y.seq - x.seq - 1; uint64(missing) > had {
					skipped := uint64(missing) - had
					a.Skipped += skipped
					if len(a.SkippedExamples) < 5 {
						a.SkippedExamples = append(a.SkippedExamples, fmt.Sprintf("%s values %d-%d: %d skipped at the source (sequence %d to %d)",
							subject, x.v+1, y.v-1, skipped, x.seq, y.seq))
					}
					missing -= int64(skipped)
					if missing == 0 {
						continue
					}
				}
			}
			a.Lost += uint64(missing)
			for v := x.v + 1; published != nil && v < y.v; v++ {
				if published(subject, v) {
					a.LostPublished++
				}
			}
			run := -1
			for j, r := range runs {
				if !r.killAt.Before(x.at) && r.killAt.Before(y.at) {
					run = j
					break
				}
			}
			if run >= 0 {
				a.LostByRun[run] += uint64(missing)
			} else {
				a.LostSteady += uint64(missing)
			}
			if len(a.LostExamples) < 5 {
				where := "in steady operation"
				if run >= 0 {
					where = fmt.Sprintf("at run %d's restart", run+1)
				}
				a.LostExamples = append(a.LostExamples, fmt.Sprintf("%s values %d-%d (%d) %s", subject, x.v+1, y.v-1, missing, where))
			}
		}
	}
	return a
}

// rrRunView is what one run's restart produced, seen at the subscriber
// (every update the new process published, stored or not) and in obs.
type rrRunView struct {
	// gap is from the restart to the first counter value after it in
	// obs; outage from the kill to it; silence from the last counter
	// value before the kill to it.
	gap, outage, silence time.Duration
	flowed               bool // a counter value came after the restart
	// refresh: an update of a refresh snapshot was published after the
	// restart; newSub: the static tag's value was (a new subscription
	// sends every item's current value; a subscription taken over sends
	// nothing for a value that does not change).
	refresh, newSub bool
}

// rrViewRun looks at run r (until the next run's kill, or the end): obs
// are the stored (or received) updates, published every update the
// subscriber saw, static the static tag's subject.
func rrViewRun(r rrRestart, until time.Time, obs, published []rrObs, static string) rrRunView {
	var v rrRunView
	var last time.Time
	for _, o := range obs {
		if !o.counter {
			continue
		}
		if o.at.Before(r.killAt) {
			last = o.at
			continue
		}
		if !o.at.Before(r.restartAt) && (until.IsZero() || o.at.Before(until)) {
			v.flowed = true
			v.gap, v.outage = o.at.Sub(r.restartAt), o.at.Sub(r.killAt)
			if !last.IsZero() {
				v.silence = o.at.Sub(last)
			}
			break
		}
	}
	for _, o := range published {
		if o.at.Before(r.restartAt) || (!until.IsZero() && !o.at.Before(until)) {
			continue
		}
		v.refresh = v.refresh || o.refresh
		v.newSub = v.newSub || o.subject == static
	}
	return v
}

// rrTransferCount sums the numeric fields of a relay's source stats whose
// name speaks of a transfer (a successor that took the subscriptions
// over), if the relay reports one; found is false if it reports none.
func rrTransferCount(sources []any) (n uint64, found bool) {
	for _, s := range sources {
		m, _ := s.(map[string]any)
		for k, v := range m {
			f, ok := v.(float64)
			if ok && strings.Contains(strings.ToLower(k), "transfer") {
				n += uint64(f)
				found = true
			}
		}
	}
	return n, found
}

// rrInt is a counter's value as an integer, whatever integer type the
// server gave it.
func rrInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	case uint32:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint8:
		return int64(x), true
	case float64:
		return int64(x), x == math.Trunc(x)
	}
	return 0, false
}
