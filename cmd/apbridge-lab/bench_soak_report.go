package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// report waits for what is in flight, audits the stream with the
// JetStream sink, and builds the soak's result.
func (r *soakRig) report(ctx context.Context, seed int64, counts map[string]int, gaps map[string][]float64) (*result, error) {
	// Stop the relays (they flush what they have), then let what is in
	// flight arrive: until nothing new for 500 ms.
	r.stopRelays()
	last := r.check.recorded()
	for quiet := 0; quiet < 5; {
		if err := ctxtime.Sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
		if n := r.check.recorded(); n != last {
			last, quiet = n, 0
		} else {
			quiet++
		}
	}
	live := r.check.totals()
	res := &result{Runs: r.cfg.cycles}
	res.set("cycles", r.cfg.cycles)
	res.set("seed", seed)
	res.set("sink", r.cfg.sink)
	res.set("faults", counts)
	tags := 0
	for _, ua := range r.uas {
		tags += len(ua.pair.Tags())
	}
	res.set("tags", tags+len(r.gwps)*soakGalaxyTags)
	maxGaps := map[string]float64{}
	for k, kc := range live.Kinds {
		maxGaps[k] = ms(kc.MaxGap)
		res.MaxGap = max(res.MaxGap, maxGaps[k])
	}
	res.set("max_gap_ms_by_fault", maxGaps)
	p50, p99 := map[string]float64{}, map[string]float64{}
	for k, g := range gaps {
		p50[k], p99[k] = percentile(g, 50), percentile(g, 99)
	}
	res.set("gap_ms_p50_by_fault", p50)
	res.set("gap_ms_p99_by_fault", p99)
	if r.cfg.fleet {
		res.set("relays", len(r.relays))
		return res, r.reportFleet(ctx, res)
	}
	res.set("updates", r.check.updates())
	res.set("source_values_skipped", live.Skipped)
	if r.cfg.sink == soakSinkJetStream {
		stream, err := r.auditStream(ctx)
		if err != nil {
			return nil, err
		}
		res.Lost, res.Duplicated = stream.Lost, stream.Duplicated
		res.set("reordered", stream.Reordered)
		res.set("repeats_stored_once", stream.Repeats)
		res.set("stream_by_fault", byFault(stream))
		res.set("live_lost", live.Lost)
		res.set("live_duplicated", live.Duplicated)
		res.set("live_reordered", live.Reordered)
		res.set("live_by_fault", byFault(live))
		if len(stream.LostExamples) > 0 {
			res.set("lost_examples", stream.LostExamples)
		}
	} else {
		res.Lost, res.Duplicated = live.Lost, live.Duplicated
		res.set("reordered", live.Reordered)
		res.set("by_fault", byFault(live))
		if len(live.LostExamples) > 0 {
			res.set("lost_examples", live.LostExamples)
		}
	}
	start, end := r.relays[0].start, r.relays[0].end
	res.set("rss_start_mib", round3(start.RSSMiB))
	res.set("rss_end_mib", round3(end.RSSMiB))
	res.set("heap_start_mib", round3(start.HeapMiB))
	res.set("heap_end_mib", round3(end.HeapMiB))
	res.set("goroutines_start", start.Goroutines)
	res.set("goroutines_end", end.Goroutines)
	return res, nil
}

// byFault is the per-kind part of a result, kinds in name order.
func byFault(t soakTotals) map[string]soakKind {
	out := make(map[string]soakKind, len(t.Kinds))
	for _, k := range slices.Sorted(maps.Keys(t.Kinds)) {
		out[k] = t.Kinds[k]
	}
	return out
}

// auditStream reads the whole stream, in stream order, and checks every
// stored update as the subscriber checks what it receives; a problem is
// charged to the fault under way at the update's source time. A cluster
// that has just had a node restarted may answer "no responders" or time
// out for a moment: the audit starts over until its deadline.
func (r *soakRig) auditStream(ctx context.Context) (soakTotals, error) {
	actx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		t, err := r.auditStreamOnce(actx)
		if err == nil || errors.Is(err, jetstream.ErrStreamNotFound) {
			return t, err
		}
		fmt.Fprintf(r.cfg.progress, "  stream audit: %v; reading again\n", err)
		if serr := ctxtime.Sleep(actx, 500*time.Millisecond); serr != nil {
			return soakTotals{}, fmt.Errorf("stream audit: %w (last error: %v)", serr, err)
		}
	}
}

func (r *soakRig) auditStreamOnce(actx context.Context) (soakTotals, error) {
	nc, err := nats.Connect(r.cl.URLs()[0], append(r.cl.ClientOptions(), nats.Name("soak-audit"))...)
	if err != nil {
		return soakTotals{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return soakTotals{}, err
	}
	if err := r.cl.WaitStreamCurrent(actx, soakStream); err != nil {
		return soakTotals{}, err
	}
	s, err := js.Stream(actx, soakStream)
	if err != nil {
		return soakTotals{}, err
	}
	info, err := s.Info(actx)
	if err != nil {
		return soakTotals{}, err
	}
	total := info.State.Msgs
	check := newSoakCheck()
	for k, n := range r.check.faultCounts() {
		for range n {
			check.fault(k)
		}
	}
	cons, err := s.OrderedConsumer(actx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return soakTotals{}, err
	}
	// The IDs of the repeated updates the subscriber saw, and which of
	// them the stream holds.
	r.mu.Lock()
	stored := map[string]bool{}
	for _, bySeq := range r.repeats {
		for _, id := range bySeq {
			stored[id] = false
		}
	}
	r.mu.Unlock()
	var read uint64
	for read < total {
		batch, err := cons.Fetch(int(min(total-read, 4096)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return soakTotals{}, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
				if _, ok := stored[id]; ok {
					stored[id] = true
				}
			}
			u, err := wire.DecodeJSON(m.Data())
			if err != nil {
				continue
			}
			check.record(r.whereAt(u.SourceTime), m.Subject(), isCounter(u.Tag), u.Seq, u.Value, u.SourceTime)
		}
		read += uint64(n)
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return soakTotals{}, err
		}
		if n == 0 {
			return soakTotals{}, fmt.Errorf("stream %s: read %d of %d messages, then nothing more", soakStream, read, total)
		}
	}
	// An update that repeated one the stream holds is stored once: its
	// sequence number is missing from the stream, its update is not.
	r.mu.Lock()
	repeats := check.excuse(func(key string, seq uint64) bool {
		id, ok := r.repeats[key][seq]
		return ok && stored[id]
	})
	r.mu.Unlock()
	fmt.Fprintf(r.cfg.progress, "  stream %s audited: %d messages; %d repeats of stored updates stored once\n", soakStream, read, repeats)
	t := check.totals()
	t.Repeats = repeats
	return t, nil
}
