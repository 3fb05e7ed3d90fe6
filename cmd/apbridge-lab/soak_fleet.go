package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// The soak's fleet (--fleet): three relay processes with the same sources
// and a fleet section, and a relay kill among the faults.
const (
	soakRelayKill = "relay_kill"
	soakRelays    = 3
	soakLeaseTTL  = 3 * time.Second
	// soakFleetBucket is the fleet's lease bucket (stream KV_<bucket>).
	soakFleetBucket = "soak_fleet"
	// soakRestartWithin bounds the restart of a killed relay: the fleet
	// refuses its ID until the dead process's membership key expires.
	soakRestartWithin = 30 * time.Second
)

// soakFleetIDs chooses relay IDs under which rendezvous placement gives
// each of the three relays a source at least, so that a kill of any of
// them has something to take over and each relay's process is measured
// running sources. Placement is a hash, so some sets of names leave a
// relay idle; the first set that does not is used.
func soakFleetIDs(sources []string) ([]string, error) {
	for k := range 1000 {
		var ids []string
		for i := range soakRelays {
			ids = append(ids, fmt.Sprintf("r%d-%d", i+1, k))
		}
		owns := map[string]bool{}
		for _, s := range sources {
			owns[fleet.Rank(s, ids)[0]] = true
		}
		if len(owns) == len(ids) {
			return ids, nil
		}
	}
	return nil, fmt.Errorf("no relay IDs give each of %d relays one of the sources %v", soakRelays, sources)
}

// soakKill is one relay kill: which relay, when, and the sources it
// owned then.
type soakKill struct {
	relay   string
	at      time.Time
	sources []string
	where   soakWhere
}

// relayKill kills (SIGKILL) a relay that owns sources, drawn from the
// seed, waits for the others to take its sources over, and starts it
// again under the same ID; the soak then waits for the fleet to be whole
// again, which includes the handover back to it.
func (r *soakRig) relayKill(ctx context.Context) error {
	var owning []*soakRelay
	owned := map[*soakRelay][]string{}
	last := map[*soakRelay]soakRelayStats{}
	for _, rel := range r.relays {
		st, err := rel.child.state()
		if err != nil {
			return fmt.Errorf("relay %s: %w", rel.id, err)
		}
		last[rel] = st
		if len(st.Owned) > 0 {
			owning = append(owning, rel)
			owned[rel] = st.Owned
		}
	}
	if len(owning) == 0 {
		return errors.New("no relay owns a source")
	}
	v := owning[r.rng.IntN(len(owning))]
	fmt.Fprintf(r.cfg.progress, "    kill relay %s (owns %s)\n", v.id, strings.Join(owned[v], ", "))
	k := soakKill{relay: v.id, at: time.Now(), sources: owned[v], where: r.where.Load().(soakWhere)}
	v.child.kill()
	v.child = nil
	v.kills++
	v.prior.add(last[v])
	r.mu.Lock()
	r.kills = append(r.kills, k)
	r.mu.Unlock()
	err := r.poll(ctx, "the others to take over "+strings.Join(k.sources, ", "), soakWholeWithin, func() (bool, error) {
		held := map[string]bool{}
		for _, rel := range r.relays {
			if rel.child == nil {
				continue
			}
			st, err := rel.child.state()
			if err != nil {
				return false, err
			}
			for _, s := range st.Owned {
				held[s] = true
			}
		}
		for _, s := range k.sources {
			if !held[s] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	return r.restartRelay(ctx, v)
}

// restartRelay starts v again under its ID. A start the fleet refuses
// (the dead process's membership key has not expired yet) ends the
// process: it is started again until soakRestartWithin.
func (r *soakRig) restartRelay(ctx context.Context, v *soakRelay) error {
	deadline := time.Now().Add(soakRestartWithin)
	for {
		c, err := startSoakChild(ctx, v.config, v.logPath, r.cfg.verbose)
		if err == nil {
			v.child, v.restarted = c, true
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("relay %s not started again within %v: %w (its log: %s)", v.id, soakRestartWithin, err, v.logPath)
		}
		fmt.Fprintf(r.cfg.progress, "    relay %s: %v; starting it again\n", v.id, err)
		// A pause between attempts: the key expires on the server's
		// clock, there is nothing to wait on.
		if err := ctxtime.Sleep(ctx, soakLeaseTTL/3); err != nil {
			return err
		}
	}
}

// measureRestarted takes the start stats of a relay started again, once
// the fleet is whole: its process's life starts over.
func (r *soakRig) measureRestarted() error {
	for _, rel := range r.relays {
		if !rel.restarted {
			continue
		}
		st, err := rel.child.stats()
		if err != nil {
			return fmt.Errorf("relay %s: %w", rel.id, err)
		}
		rel.start, rel.restarted = st, false
	}
	return nil
}

// soakOwner is a relay process's ownership of a source, as its updates
// carry it: its relay ID and the lease's fencing token.
type soakOwner struct {
	relay string
	token uint64
}

// soakOwnerChange is a new owner's first update of a source, as the
// subscriber received it, and until when the one before still published.
type soakOwnerChange struct {
	source   string
	from, to soakOwner
	at       time.Time
	fromLast time.Time // the old owner's last update after at (zero if none)
}

// dual is how long both published.
func (c soakOwnerChange) dual() time.Duration {
	if c.fromLast.IsZero() {
		return 0
	}
	return c.fromLast.Sub(c.at)
}

// soakOwners follows, from the fleet headers of the updates the
// subscriber receives, which relay publishes each source. A later owner
// has a larger token; an update with a smaller one is a former owner's
// (a handover's overlap, or what a dead relay had in flight).
type soakOwners struct {
	mu      sync.Mutex
	cur     map[string]soakOwner
	changes []soakOwnerChange
	// published is the highest counter value each owner published on
	// each subject: the audit tells with it a value a relay published and
	// the stream did not store from one it never published.
	published map[soakPublished]int64
}

type soakPublished struct {
	subject string
	owner   soakOwner
}

func newSoakOwners() *soakOwners {
	return &soakOwners{cur: map[string]soakOwner{}, published: map[soakPublished]int64{}}
}

// record takes an update u of the subject soak.<source>.<tag> received at
// now.
func (w *soakOwners) record(m *nats.Msg, u *wire.Update, now time.Time) {
	parts := strings.SplitN(m.Subject, ".", 3)
	token, err := strconv.ParseUint(m.Header.Get(wire.HeaderLease), 10, 64)
	if len(parts) < 3 || err != nil {
		return
	}
	o := soakOwner{m.Header.Get(wire.HeaderRelay), token}
	w.note(parts[1], o, now)
	if v, ok := u.Value.(int64); ok && isCounter(u.Tag) {
		w.mu.Lock()
		k := soakPublished{m.Subject, o}
		w.published[k] = max(w.published[k], v)
		w.mu.Unlock()
	}
}

// wasPublished reports whether o published value v of subject (or a
// later one: a counter's values are published in order).
func (w *soakOwners) wasPublished(subject string, o soakOwner, v int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.published[soakPublished{subject, o}]
	return ok && last >= v
}

func (w *soakOwners) note(source string, o soakOwner, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.cur[source]
	switch {
	case !ok:
		w.cur[source] = o
	case o.token > c.token:
		w.changes = append(w.changes, soakOwnerChange{source: source, from: c, to: o, at: now})
		w.cur[source] = o
	case o.token < c.token:
		for i := len(w.changes) - 1; i >= 0; i-- {
			if ch := &w.changes[i]; ch.source == source && ch.from == o {
				ch.fromLast = now
				break
			}
		}
	}
}

// soakTakeover is what one relay kill cost one of its sources.
type soakTakeover struct {
	Source string  `json:"source"`
	Before string  `json:"before"`
	After  string  `json:"after"`
	Ms     float64 `json:"takeover_ms"`
	DualMs float64 `json:"dual_owner_ms"`
	// BackMs is the handover back to the relay started again: how long
	// both published (the overlap, on purpose).
	BackMs float64 `json:"handback_overlap_ms"`
	Cycle  int     `json:"cycle"`
	// Token is the new owner's lease token: its log tells its instance's
	// takeover (soak_fleet_takeover.go).
	Token uint64 `json:"token"`
	// The takeover as the new owner's log tells it, and what the kill
	// cost the source in the stream.
	soakTakeoverOutcome
	kill int // the kill's index in the run's kills
}

// takeovers pairs each kill's sources with the owner changes the
// subscriber saw: the first change away from the dead relay after the
// kill (the takeover) and the first change back to its ID after that. A
// source no other relay was seen to publish after the kill is in unseen:
// a finding, reported with the figures rather than instead of them.
func (w *soakOwners) takeovers(kills []soakKill) (out []soakTakeover, unseen []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ki, k := range kills {
		for _, s := range k.sources {
			i := slices.IndexFunc(w.changes, func(c soakOwnerChange) bool {
				return c.source == s && c.from.relay == k.relay && c.to.relay != k.relay && c.at.After(k.at)
			})
			if i < 0 {
				unseen = append(unseen, fmt.Sprintf("cycle %d: %s of the killed relay %s", k.where.cycle, s, k.relay))
				continue
			}
			c := w.changes[i]
			t := soakTakeover{Source: s, Before: k.relay, After: c.to.relay, Ms: ms(c.at.Sub(k.at)), DualMs: ms(c.dual()), Cycle: k.where.cycle,
				Token: c.to.token, kill: ki}
			if j := slices.IndexFunc(w.changes[i+1:], func(b soakOwnerChange) bool {
				return b.source == s && b.to.relay == k.relay
			}); j >= 0 {
				t.BackMs = ms(w.changes[i+1+j].dual())
			}
			out = append(out, t)
		}
	}
	return out, unseen
}
