package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The fleet's check is by identity, on the stream. A relay numbers its
// updates per process, so the numbers of two relays that publish a source
// one after the other do not follow each other. What does, whatever relay
// published it, is a counter tag's value: the simulated servers count
// every counter up by one per tick, so a counter's values in the stream
// must run without a hole, once each, in order. The message ID (the
// update's identity, the same at every relay) lets the stream keep one
// copy of an update two relays published.
//
// A hole is then told apart by who published around it:
//   - the same relay process on both sides (relay ID and lease token):
//     the relay's sequence numbers say whether it had the values. As many
//     numbers as are missing between the two are lost (the relay had them);
//     the rest the source never delivered (source_values_skipped).
//   - another owner after a relay kill: the values produced before the
//     kill are lost (the dead relay had them, or its session's next
//     notification would have carried them); those produced from the kill
//     until the new owner's first update are unserved: no relay ran a
//     session to the servers, and a new session is sent each tag's current
//     value, not its history.
//   - another owner without a kill: lost.
//
// A hole is charged to the fault under way when it showed (the source
// time of the value after it), as the sequence check charges a missing
// number; a kill's, to the kill. The production time of a value in a
// kill's hole is interpolated between the stored values around it (a
// counter ticks evenly).

// soakIDKind is what the identity check charged to one fault kind.
type soakIDKind struct {
	Lost uint64 `json:"lost"`
	// LostPublished are the lost values the subscriber saw published by
	// the relay that published the value before the hole: published, not
	// stored. The others that relay never published.
	LostPublished uint64 `json:"lost_published"`
	Duplicated    uint64 `json:"duplicated"`
	Reordered     uint64 `json:"reordered"`
	Skipped       uint64 `json:"source_values_skipped"`
	Unserved      uint64 `json:"unserved"`
	// StoredAgain are updates stored a second time more than the stream's
	// duplicate window after the first: a new session is sent the current
	// value of a tag that has not changed (a setpoint), with its old
	// timestamp, so the same update; the stream drops such a repeat by
	// its ID only inside the window.
	StoredAgain uint64 `json:"repeats_stored_again"`
}

// soakIdentity is the result of the identity check.
type soakIdentity struct {
	Kinds                                      map[string]*soakIDKind
	Lost, LostPublished, Duplicated, Reordered uint64
	Skipped, Unserved, StoredAgain             uint64
	Stored, Counted                            uint64 // messages read; counter values checked
	// LostBySource and UnservedBySource split the relay kills' lost and
	// unserved values by source: with fleet.handoff an OPC UA source's
	// successor takes its subscription over, and a gateway source's
	// resumes the dead owner's session's event stream when the gateway
	// advertises event-resume; each falls back otherwise.
	LostBySource, UnservedBySource map[string]uint64
	// ByKill splits them by kill (its index in the kills) and source, so
	// that each can be set beside that source's takeover.
	ByKill                           map[soakKillSource]*soakKillCost
	LostExamples, DuplicatedExamples []string
	ReorderedExamples                []string
}

// bySource counts one value of source in *m.
func (a *soakIdentity) bySource(m *map[string]uint64, source string) {
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[source]++
}

// soakKillSource is one source of one relay kill: the kill's index in the
// run's kills.
type soakKillSource struct {
	kill   int
	source string
}

// soakKillCost is what a relay kill cost one of its sources.
type soakKillCost struct{ lost, unserved uint64 }

// killCost is the cost of kill k to source.
func (a *soakIdentity) killCost(k int, source string) *soakKillCost {
	if a.ByKill == nil {
		a.ByKill = map[soakKillSource]*soakKillCost{}
	}
	c := a.ByKill[soakKillSource{k, source}]
	if c == nil {
		c = &soakKillCost{}
		a.ByKill[soakKillSource{k, source}] = c
	}
	return c
}

func (a *soakIdentity) kind(k string) *soakIDKind {
	kc := a.Kinds[k]
	if kc == nil {
		kc = &soakIDKind{}
		a.Kinds[k] = kc
	}
	return kc
}

// soakIDEntry is one stored counter value.
type soakIDEntry struct {
	value int64
	owner soakOwner
	seq   uint64
	at    time.Time // source time
}

// soakAuditCtx is what the identity check knows of the run: the fault
// under way at a time, the relay kills, and whether an owner published a
// counter value.
type soakAuditCtx struct {
	whereAt   func(time.Time) soakWhere
	kills     []soakKill
	published func(subject string, o soakOwner, v int64) bool
	// dupWindow is the stream's duplicate window (0: unknown, every
	// repeat is a copy).
	dupWindow time.Duration
}

// auditIdentity checks the stored messages, in stream order.
func auditIdentity(msgs []natstest.StoredMsg, c soakAuditCtx) soakIdentity {
	whereAt := c.whereAt
	a := soakIdentity{Kinds: map[string]*soakIDKind{}}
	ids := map[string]int{} // -> the first one's index in msgs
	// A counter value is there in whatever status it was stored: a server
	// going out of service sends its last values as Bad_OutOfService, and
	// the relay carries them as they are. The same value in another status
	// is another update (the standby's Good one after a switch); in the
	// same status under another ID, a copy.
	type valueStatus struct {
		v      int64
		status wire.StatusCode
	}
	type tagState struct {
		max     int64
		maxAt   int                 // the index in msgs of the message that carried max
		values  map[valueStatus]int // -> the first one's index in msgs
		entries []soakIDEntry
	}
	// dup counts msgs[i], a copy of msgs[first] by what; the first few
	// are described, for the report.
	dup := func(w soakWhere, i, first int, what string) {
		a.kind(w.kind).Duplicated++
		if len(a.DuplicatedExamples) < 5 {
			a.DuplicatedExamples = append(a.DuplicatedExamples, fmt.Sprintf("%s; %s first in %s (%s, cycle %d)",
				soakDescribe(msgs[i]), what, soakDescribe(msgs[first]), w.kind, w.cycle))
		}
	}
	tags := map[string]*tagState{}
	for i, m := range msgs {
		a.Stored++
		u, err := wire.DecodeJSON(m.Data)
		if err != nil {
			continue
		}
		token, _ := strconv.ParseUint(m.Header.Get(wire.HeaderLease), 10, 64)
		owner := soakOwner{m.Header.Get(wire.HeaderRelay), token}
		if m.MsgID != "" {
			if first, ok := ids[m.MsgID]; ok {
				if c.dupWindow > 0 && m.Time.Sub(msgs[first].Time) > c.dupWindow {
					a.kind(whereAt(m.Time).kind).StoredAgain++
					ids[m.MsgID] = i
					continue
				}
				dup(whereAt(u.SourceTime), i, first, "its ID")
				continue
			}
			ids[m.MsgID] = i
		}
		v, ok := u.Value.(int64)
		if !isCounter(u.Tag) || !ok {
			continue
		}
		t := tags[m.Subject]
		if t == nil {
			t = &tagState{values: map[valueStatus]int{}}
			tags[m.Subject] = t
		}
		vs := valueStatus{v, u.Status}
		if first, ok := t.values[vs]; ok {
			dup(whereAt(u.SourceTime), i, first, "the value")
			continue
		}
		if len(t.entries) > 0 && v < t.max {
			w := whereAt(u.SourceTime)
			a.kind(w.kind).Reordered++
			if len(a.ReorderedExamples) < 5 {
				a.ReorderedExamples = append(a.ReorderedExamples, fmt.Sprintf("%s; after %s (%s, cycle %d)",
					soakDescribe(m), soakDescribe(msgs[t.maxAt]), w.kind, w.cycle))
			}
		}
		if len(t.entries) == 0 || v > t.max {
			t.max, t.maxAt = v, i
		}
		t.values[vs] = i
		t.entries = append(t.entries, soakIDEntry{v, owner, u.Seq, u.SourceTime})
		a.Counted++
	}
	for _, subject := range slices.Sorted(maps.Keys(tags)) {
		es := tags[subject].entries
		slices.SortFunc(es, func(x, y soakIDEntry) int {
			return cmp.Or(cmp.Compare(x.value, y.value), x.at.Compare(y.at))
		})
		for i := 1; i < len(es); i++ {
			a.hole(subject, es[i-1], es[i], c)
		}
	}
	for _, kc := range a.Kinds {
		a.Lost += kc.Lost
		a.LostPublished += kc.LostPublished
		a.Duplicated += kc.Duplicated
		a.Reordered += kc.Reordered
		a.Skipped += kc.Skipped
		a.Unserved += kc.Unserved
		a.StoredAgain += kc.StoredAgain
	}
	return a
}

// hole charges the values missing between the stored values x and y of
// subject.
func (a *soakIdentity) hole(subject string, x, y soakIDEntry, c soakAuditCtx) {
	whereAt, kills := c.whereAt, c.kills
	missing := y.value - x.value - 1
	if missing <= 0 {
		return
	}
	at := func(v int64) time.Time {
		return x.at.Add(time.Duration(float64(y.at.Sub(x.at)) * float64(v-x.value) / float64(y.value-x.value)))
	}
	lose := func(v int64, w soakWhere) {
		kc := a.kind(w.kind)
		kc.Lost++
		if c.published != nil && c.published(subject, x.owner, v) {
			kc.LostPublished++
		}
		if len(a.LostExamples) < 5 {
			a.LostExamples = append(a.LostExamples, fmt.Sprintf("%s value %d (%s, cycle %d)", subject, v, w.kind, w.cycle))
		}
	}
	if x.owner == y.owner {
		var had int64
		if y.seq > x.seq {
			had = int64(y.seq - x.seq - 1)
		}
		w := whereAt(y.at)
		for v := x.value + 1; v < y.value; v++ {
			if v-x.value <= had {
				lose(v, w)
			} else {
				a.kind(w.kind).Skipped++
			}
		}
		return
	}
	source := soakSubjectSource(subject)
	for ki, k := range kills {
		// The kill of the relay that published x, between x (give or take
		// the kill's own instant) and y.
		if k.relay != x.owner.relay || !slices.Contains(k.sources, source) || !x.at.Before(k.at.Add(time.Second)) || !k.at.Before(y.at) {
			continue
		}
		cost := a.killCost(ki, source)
		for v := x.value + 1; v < y.value; v++ {
			if at(v).Before(k.at) {
				lose(v, k.where)
				a.bySource(&a.LostBySource, source)
				cost.lost++
			} else {
				a.kind(k.where.kind).Unserved++
				a.bySource(&a.UnservedBySource, source)
				cost.unserved++
			}
		}
		return
	}
	w := whereAt(y.at)
	for v := x.value + 1; v < y.value; v++ {
		lose(v, w)
	}
}

// soakDescribe names a stored message for an example: where it is, who
// published it, and the update.
func soakDescribe(m natstest.StoredMsg) string {
	u, err := wire.DecodeJSON(m.Data)
	if err != nil {
		return fmt.Sprintf("%s #%d: %v", m.Subject, m.Seq, err)
	}
	snapshot := ""
	if m.Header.Get(wire.HeaderRefresh) != "" {
		snapshot = " (snapshot)"
	}
	return fmt.Sprintf("%s #%d by %s/%s: %v %v at %s, stored %s%s", m.Subject, m.Seq, m.Header.Get(wire.HeaderRelay), m.Header.Get(wire.HeaderLease),
		u.Value, u.Status, u.SourceTime.Format(time.RFC3339Nano), m.Time.Format("15:04:05.000"), snapshot)
}

// soakSubjectSource is the source of the subject soak.<source>.<tag>.
func soakSubjectSource(subject string) string {
	rest, _ := strings.CutPrefix(subject, "soak.")
	src, _, _ := strings.Cut(rest, ".")
	return src
}

// reportFleet audits the stream by identity and adds the fleet's figures
// to res: the check's, the takeovers', and each relay process's memory
// and goroutines.
func (r *soakRig) reportFleet(ctx context.Context, res *result) error {
	actx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	nc, err := nats.Connect(r.cl.URLs()[0], append(r.cl.ClientOptions(), nats.Name("soak-audit"), nats.MaxReconnects(-1))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := r.cl.WaitStreamCurrent(actx, soakStream); err != nil {
		return err
	}
	msgs, err := natstest.ReadStream(actx, nc, soakStream)
	if err != nil {
		return fmt.Errorf("stream audit: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(actx, soakStream)
	if err != nil {
		return err
	}
	info, err := s.Info(actx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	kills := slices.Clone(r.kills)
	r.mu.Unlock()
	a := auditIdentity(msgs, soakAuditCtx{r.whereAt, kills, r.owners.wasPublished, info.Config.Duplicates})
	fmt.Fprintf(r.cfg.progress, "  stream %s audited by identity: %d messages, %d counter values\n", soakStream, a.Stored, a.Counted)
	res.Lost, res.Duplicated = a.Lost, a.Duplicated
	res.set("updates", a.Stored)
	res.set("counter_values_checked", a.Counted)
	res.set("lost_published", a.LostPublished)
	res.set("reordered", a.Reordered)
	res.set("source_values_skipped", a.Skipped)
	res.set("unserved", a.Unserved)
	res.set("relay_kill_lost_by_source", a.LostBySource)
	res.set("relay_kill_unserved_by_source", a.UnservedBySource)
	res.set("repeats_stored_again", a.StoredAgain)
	res.set("duplicate_window_ms", ms(info.Config.Duplicates))
	byKind := map[string]soakIDKind{}
	for k, kc := range a.Kinds {
		byKind[k] = *kc
		// A loss a relay kill does not explain, and any reorder, is a
		// finding: the relays' logs say what they did.
		r.keepLogs = r.keepLogs || (kc.Lost > 0 && k != soakRelayKill) || kc.Reordered > 0
	}
	res.set("stream_by_fault", byKind)
	if len(a.LostExamples) > 0 {
		res.set("lost_examples", a.LostExamples)
	}
	if len(a.DuplicatedExamples) > 0 {
		res.set("duplicated_examples", a.DuplicatedExamples)
	}
	if len(a.ReorderedExamples) > 0 {
		res.set("reordered_examples", a.ReorderedExamples)
	}
	tos, unseen := r.owners.takeovers(kills)
	res.set("takeovers_unseen", len(unseen))
	if len(unseen) > 0 {
		res.set("takeovers_unseen_examples", unseen[:min(len(unseen), 5)])
	}
	setTakeoverOutcomes(r.relays, r.cfg.progress, tos, a)
	var times []float64
	var dual, back float64
	outcomes := map[string]int{}
	for _, t := range tos {
		times = append(times, t.Ms)
		dual, back = max(dual, t.DualMs), max(back, t.BackMs)
		outcomes[t.Source+" "+t.Outcome]++
		fmt.Fprintf(r.cfg.progress, "  cycle %d: %s of %s taken over by %s after %.0f ms (both published %.0f ms; back with an overlap of %.0f ms): %s\n",
			t.Cycle, t.Source, t.Before, t.After, t.Ms, t.DualMs, t.BackMs, t.describe())
	}
	res.set("takeover_outcomes", outcomes)
	if len(times) > 0 {
		res.set("takeover_ms_p50", percentile(times, 50))
		res.set("takeover_ms_p99", percentile(times, 99))
		res.set("takeover_ms_max", slices.Max(times))
	}
	res.set("dual_owner_ms", dual)
	res.set("handback_overlap_ms_max", back)
	res.set("lease_ttl_ms", ms(soakLeaseTTL))
	res.set("takeovers", tos)
	r.reportRelays(res)
	return nil
}

// soakRelayFigures are one relay's memory and goroutines over its last
// process's life (from its start, or its restart after its last kill, to
// the end).
type soakRelayFigures struct {
	ID              string  `json:"id"`
	Kills           int     `json:"kills"`
	RSSStartMiB     float64 `json:"rss_start_mib"`
	RSSEndMiB       float64 `json:"rss_end_mib"`
	GoroutinesStart int     `json:"goroutines_start"`
	GoroutinesEnd   int     `json:"goroutines_end"`
	// Its processes' lease counts, summed (a killed one's as it last
	// reported them): won, lost (taken, expired or handed over) and
	// renewals that failed without losing the lease. A lease lost other
	// than by a handover is a fault of its own.
	LeasesWon     uint64 `json:"leases_won"`
	LeasesLost    uint64 `json:"leases_lost"`
	Handovers     uint64 `json:"handovers"`
	RenewFailures uint64 `json:"renew_failures"`
	// Fenced are updates it dropped while it could not vouch for a lease:
	// in the stream check they look like values the source skipped.
	Fenced uint64 `json:"fenced"`
	// StreamFenced are updates its JetStream sink did not store because a
	// newer owner had stored the tag (late updates at a handover): in the
	// stream check they are lost, or never missed if the new owner had
	// them too.
	StreamFenced uint64 `json:"stream_fenced"`
}

// reportRelays adds each relay's figures, and as rss_* and goroutines_*
// those of the relay that grew most (over its last process's life).
func (r *soakRig) reportRelays(res *result) {
	var figs []soakRelayFigures
	var rssOf, gorOf *soakRelay
	for _, rel := range r.relays {
		f := soakRelayFigures{ID: rel.id, Kills: rel.kills, RSSStartMiB: round3(rel.start.RSSMiB), RSSEndMiB: round3(rel.end.RSSMiB),
			GoroutinesStart: rel.start.Goroutines, GoroutinesEnd: rel.end.Goroutines}
		all := rel.prior
		all.add(rel.end)
		f.LeasesWon, f.LeasesLost, f.Handovers, f.RenewFailures, f.Fenced = all.won, all.lost, all.handovers, all.renewFailures, all.fenced
		f.StreamFenced = all.streamFenced
		figs = append(figs, f)
		if rssOf == nil || rel.end.RSSMiB-rel.start.RSSMiB > rssOf.end.RSSMiB-rssOf.start.RSSMiB {
			rssOf = rel
		}
		if gorOf == nil || rel.end.Goroutines-rel.start.Goroutines > gorOf.end.Goroutines-gorOf.start.Goroutines {
			gorOf = rel
		}
	}
	res.set("relay_figures", figs)
	res.set("rss_start_mib", round3(rssOf.start.RSSMiB))
	res.set("rss_end_mib", round3(rssOf.end.RSSMiB))
	res.set("goroutines_start", gorOf.start.Goroutines)
	res.set("goroutines_end", gorOf.end.Goroutines)
	res.set("rss_growth_mib_max", round3(rssOf.end.RSSMiB-rssOf.start.RSSMiB))
	res.set("goroutines_growth_max", gorOf.end.Goroutines-gorOf.start.Goroutines)
}
