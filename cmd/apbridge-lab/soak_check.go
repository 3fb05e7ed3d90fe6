package main

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// soakSteady is the fault kind charged with what happens outside any
// fault: before the first and while the relay is whole between two.
const soakSteady = "steady"

// soakCheck checks every update the soak's independent subscriber (or the
// audit of the stream) sees, by the relay's per-tag sequence number: each
// number must arrive once, and in order. A problem is charged to the fault
// kind under way when it showed, so that the report can say what each kind
// of fault costs. It also counts the source values the relay never
// carried (a counter tag that skips values), which is the source side's
// cost and not a loss of the relay's updates.
type soakCheck struct {
	mu     sync.Mutex
	tags   map[string]*soakTag
	byKind map[string]*soakKind
	gap    time.Duration // the longest silence of a counter since takeGap
	// bySeq checks the relay's sequence numbers. Off for a fleet, whose
	// numbers are per relay process: its check is by identity, on the
	// stream (soak_fleet_audit.go), and this one only times silences.
	bySeq    bool
	received uint64 // updates recorded, repeats included
}

// soakTag is what was seen of one tag.
type soakTag struct {
	seen    []uint64             // bit n: sequence number n arrived
	max     uint64               // the highest sequence number seen
	missing map[uint64]soakWhere // numbers skipped over -> where they went missing
	lastAt  time.Time            // when its last update arrived
	lastVal int64                // a counter's highest value
	hasVal  bool
}

// soakWhere is the fault under way: its kind and its cycle (0 before the
// first).
type soakWhere struct {
	kind  string
	cycle int
}

// soakKind is what one fault kind cost.
type soakKind struct {
	Faults     int           `json:"faults"`
	Lost       uint64        `json:"lost"`
	Duplicated uint64        `json:"duplicated"`
	Reordered  uint64        `json:"reordered"`
	Skipped    uint64        `json:"source_values_skipped"`
	MaxGap     time.Duration `json:"-"`
}

func newSoakCheck() *soakCheck {
	return &soakCheck{tags: map[string]*soakTag{}, byKind: map[string]*soakKind{}, bySeq: true}
}

// newSoakGapCheck is a check that only times the counters' silences and
// tells when every counter has moved: the live view of a fleet.
func newSoakGapCheck() *soakCheck {
	return &soakCheck{tags: map[string]*soakTag{}, byKind: map[string]*soakKind{}}
}

func (c *soakCheck) kind(k string) *soakKind {
	kc := c.byKind[k]
	if kc == nil {
		kc = &soakKind{}
		c.byKind[k] = kc
	}
	return kc
}

// fault counts one fault of kind k.
func (c *soakCheck) fault(k string) {
	c.mu.Lock()
	c.kind(k).Faults++
	c.mu.Unlock()
}

// faultCounts is how many faults of each kind were counted.
func (c *soakCheck) faultCounts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, kc := range c.byKind {
		if kc.Faults > 0 {
			out[k] = kc.Faults
		}
	}
	return out
}

// isCounter reports whether a tag changes at every tick of its simulation
// (10 Hz), so that its silence and its skipped values mean something:
// the OPC UA pair's Counter tags and the gateway's Galaxy counters.
func isCounter(tag string) bool {
	return strings.HasPrefix(tag, "Counter") || strings.HasPrefix(tag, "Galaxy_")
}

// record takes one update of the tag at key (its subject) with sequence
// number seq and, for a counter, its value, seen at now while the fault w
// was under way.
func (c *soakCheck) record(w soakWhere, key string, counter bool, seq uint64, value any, now time.Time) {
	if c.bySeq && seq == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received++
	t := c.tags[key]
	if t == nil {
		t = &soakTag{missing: map[uint64]soakWhere{}}
		c.tags[key] = t
	}
	kc := c.kind(w.kind)
	if c.bySeq && !c.sequence(t, kc, seq, w) {
		return
	}
	if !counter {
		return
	}
	if !t.lastAt.IsZero() {
		kc.MaxGap = max(kc.MaxGap, now.Sub(t.lastAt))
		c.gap = max(c.gap, now.Sub(t.lastAt))
	}
	t.lastAt = now
	v, ok := value.(int64)
	if !ok {
		return
	}
	if t.hasVal && v > t.lastVal+1 {
		kc.Skipped += uint64(v - t.lastVal - 1)
	}
	if !t.hasVal || v > t.lastVal {
		t.lastVal, t.hasVal = v, true
	}
}

// sequence checks seq against what t has seen; false for a duplicate,
// which is not looked at further. c.mu is held.
func (c *soakCheck) sequence(t *soakTag, kc *soakKind, seq uint64, w soakWhere) bool {
	word, bit := seq/64, uint64(1)<<(seq%64)
	for uint64(len(t.seen)) <= word {
		t.seen = append(t.seen, 0)
	}
	switch {
	case t.seen[word]&bit != 0:
		kc.Duplicated++
		return false
	case seq < t.max:
		// Late, not lost: it was charged as missing when a later number
		// came first.
		kc.Reordered++
		delete(t.missing, seq)
	default:
		for s := t.max + 1; s < seq; s++ {
			t.missing[s] = w
		}
		t.max = seq
	}
	t.seen[word] |= bit
	return true
}

// takeGap returns the longest silence of a counter since the last call,
// and starts over: one fault's gap.
func (c *soakCheck) takeGap() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gap
	c.gap = 0
	return g
}

// seenSince reports whether every tag of want (keys) has had an update
// since at.
func (c *soakCheck) seenSince(want []string, at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tag := range want {
		t := c.tags[tag]
		if t == nil || t.lastAt.Before(at) {
			return false
		}
	}
	return true
}

// recorded is the number of updates recorded, repeats included: what the
// soak watches to know that nothing is in flight any more.
func (c *soakCheck) recorded() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.received
}

// updates is the number of distinct updates seen.
func (c *soakCheck) updates() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for _, t := range c.tags {
		n += t.max - uint64(len(t.missing))
	}
	return n
}

// soakTotals is the check's result: per kind, and over all kinds.
type soakTotals struct {
	Kinds                                map[string]soakKind
	Lost, Duplicated, Reordered, Skipped uint64
	LostExamples                         []string
	// Repeats are missing numbers excused by the stream audit (a refresh
	// of an update the stream holds).
	Repeats uint64
}

// excuse drops the missing numbers for which ok holds, and counts them.
func (c *soakCheck) excuse(ok func(key string, seq uint64) bool) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for key, t := range c.tags {
		for seq := range t.missing {
			if ok(key, seq) {
				delete(t.missing, seq)
				n++
			}
		}
	}
	return n
}

// totals charges the numbers still missing to the kinds they went missing
// under and sums up.
func (c *soakCheck) totals() soakTotals {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := soakTotals{Kinds: map[string]soakKind{}}
	for k, kc := range c.byKind {
		out.Kinds[k] = *kc
	}
	names := make([]string, 0, len(c.tags))
	for name := range c.tags {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for seq, w := range c.tags[name].missing {
			kc := out.Kinds[w.kind]
			kc.Lost++
			out.Kinds[w.kind] = kc
			if len(out.LostExamples) < 5 {
				out.LostExamples = append(out.LostExamples, fmt.Sprintf("%s #%d (%s, cycle %d)", name, seq, w.kind, w.cycle))
			}
		}
	}
	for _, kc := range out.Kinds {
		out.Lost += kc.Lost
		out.Duplicated += kc.Duplicated
		out.Reordered += kc.Reordered
		out.Skipped += kc.Skipped
	}
	return out
}
