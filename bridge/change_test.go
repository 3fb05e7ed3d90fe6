package bridge_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// recorder keeps every update a consumer received, by tag.
type recorder struct {
	mu     sync.Mutex
	byTag  map[string][]wire.Update
	subjOf map[string]map[string]bool // tag -> subjects seen
	events []map[string]any
}

func record(t *testing.T, e *env) *recorder {
	t.Helper()
	rec := &recorder{byTag: map[string][]wire.Update{}, subjOf: map[string]map[string]bool{}}
	if _, err := e.nc.Subscribe(">", func(m *nats.Msg) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if strings.HasPrefix(m.Subject, "apbridge.events.") {
			var ev map[string]any
			if json.Unmarshal(m.Data, &ev) == nil {
				rec.events = append(rec.events, ev)
			}
			return
		}
		if !strings.HasPrefix(m.Subject, "apbridge.sim1.") && !strings.HasPrefix(m.Subject, "moved.") &&
			!strings.HasPrefix(m.Subject, "apbridge.sim2.") {
			return
		}
		u, err := wire.DecodeJSON(m.Data)
		if err != nil {
			return
		}
		rec.byTag[u.Tag] = append(rec.byTag[u.Tag], u)
		if rec.subjOf[u.Tag] == nil {
			rec.subjOf[u.Tag] = map[string]bool{}
		}
		rec.subjOf[u.Tag][m.Subject] = true
	}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitInterest(t, e.nc, e.conn)
	return rec
}

func (rec *recorder) count(tag string) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.byTag[tag])
}

func (rec *recorder) updates(tag string) []wire.Update {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]wire.Update(nil), rec.byTag[tag]...)
}

func (rec *recorder) event(kind string) map[string]any {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, ev := range rec.events {
		if ev["event"] == kind {
			return ev
		}
	}
	return nil
}

// checkSeq fails unless a tag's updates are numbered 1, 2, 3... with no
// gap and no repeat.
func checkSeq(t *testing.T, tag string, us []wire.Update) {
	t.Helper()
	for i, u := range us {
		if u.Seq != uint64(i)+1 {
			t.Fatalf("tag %s: update %d has seq %d, want %d (a gap or a repeat)", tag, i, u.Seq, i+1)
		}
	}
}

// TestApplyTagChanges: tags added, removed, moved to a new address and to
// a new subject, and made writable, while the source emits. Tags the change
// does not name see nothing of it: no unsubscribe, no new subscribe, their
// seq goes on; a moved tag keeps its seq; a removed tag leaves the
// snapshot, publishes nothing after Apply, and an event names it.
func TestApplyTagChanges(t *testing.T) {
	tags := []bridge.TagConfig{
		{Name: "keep", Address: "ns=1;s=keep"},
		{Name: "gone", Address: "ns=1;s=gone"},
		{Name: "readdr", Address: "ns=1;s=old"},
		{Name: "resubj", Address: "ns=1;s=resubj"},
		{Name: "wr", Address: "ns=1;s=wr"},
	}
	e := setup(t, bridge.Config{}, tags)
	rec := record(t, e)
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 5 })
	for range 3 {
		e.src.EmitAll()
	}
	testutil.WaitFor(t, "first updates", 5*time.Second, func() bool { return rec.count("gone") == 3 && rec.count("keep") == 3 })
	before := e.src.SubscribedTags()
	requestsBefore, _ := e.src.Requests()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.b.Apply(ctx, bridge.Change{Tags: []bridge.TagChanges{{
		Source: "sim1",
		Add:    []bridge.TagConfig{{Name: "new", Address: "ns=1;s=new"}},
		Remove: []string{"gone"},
		Change: []bridge.TagUpdate{
			{Config: bridge.TagConfig{Name: "readdr", Address: "ns=1;s=new-address"}},
			{Config: bridge.TagConfig{Name: "resubj", Address: "ns=1;s=resubj", Subject: "moved.resubj"}},
			{Config: bridge.TagConfig{Name: "wr", Address: "ns=1;s=wr", Writable: true}},
		},
	}}})
	if err != nil || len(res.Problems) > 0 {
		t.Fatalf("Apply: %v %v", err, res.Problems)
	}
	goneCount := rec.count("gone")
	testutil.WaitFor(t, "the added and moved tags subscribed", 5*time.Second, func() bool {
		st := e.src.SubscribedTags()
		return st["new"].Address == "ns=1;s=new" && st["readdr"].Address == "ns=1;s=new-address"
	})
	after := e.src.SubscribedTags()
	if _, ok := after["gone"]; ok {
		t.Fatal("the removed tag is still subscribed at the source")
	}
	for _, name := range []string{"keep", "resubj", "wr"} {
		if after[name] != before[name] {
			t.Fatalf("untouched at the source, tag %s went from %+v to %+v", name, before[name], after[name])
		}
	}
	if after["readdr"].Handle == before["readdr"].Handle {
		t.Fatal("a moved tag kept its handle: a late update of the old item would pass for the new one")
	}
	if n := e.src.Unsubscribed(); n != 2 {
		t.Fatalf("Unsubscribe was given %d tags, want 2 (the removed and the moved)", n)
	}
	if total, _ := e.src.Requests(); total != requestsBefore+1 {
		t.Fatalf("%d subscribe requests for the change, want 1", total-requestsBefore)
	}
	for range 2 {
		e.src.EmitAll()
	}
	testutil.WaitFor(t, "updates after the change", 5*time.Second, func() bool {
		return rec.count("keep") == 5 && rec.count("new") == 2 && rec.count("resubj") == 5 && rec.count("readdr") == 5
	})
	for _, name := range []string{"keep", "readdr", "resubj", "wr", "new"} {
		checkSeq(t, name, rec.updates(name))
	}
	if n := rec.count("gone"); n != goneCount {
		t.Fatalf("the removed tag published %d updates after Apply", n-goneCount)
	}
	// Late updates of the old items (the removed tag's, the moved tag's
	// old handle) are dropped; one for a kept tag, sent after them, is
	// published (the control: the source's updates arrive in order).
	e.src.Emit(before["gone"].Handle, wire.Update{Value: int64(99), Status: wire.StatusGood})
	e.src.Emit(before["readdr"].Handle, wire.Update{Value: int64(99), Status: wire.StatusGood})
	e.src.Emit(after["keep"].Handle, wire.Update{Value: int64(99), Status: wire.StatusGood})
	testutil.WaitFor(t, "the kept tag's update", 5*time.Second, func() bool { return rec.count("keep") == 6 })
	if n, m := rec.count("gone"), rec.count("readdr"); n != goneCount || m != 5 {
		t.Fatalf("late updates of old items published: gone %d (want %d), readdr %d (want 5)", n, goneCount, m)
	}
	if s, _ := e.b.Subject("sim1", "resubj"); s != "moved.resubj" {
		t.Fatalf("resubj on %q", s)
	}
	if rec.updates("resubj")[4].Seq != 5 || !rec.subjOf["resubj"]["moved.resubj"] {
		t.Fatal("the tag moved to a new subject did not carry on there")
	}
	if _, ok := e.b.WriteSubject("sim1", "gone"); ok {
		t.Fatal("the removed tag still has a subject")
	}
	snap := testutil.Request(t, e.nc, "apbridge.snapshot", `{}`)
	if strings.Contains(string(snap.Data), `"tag":"gone"`) || !strings.Contains(string(snap.Data), `"tag":"keep"`) {
		t.Fatalf("snapshot after the removal: %s", snap.Data)
	}
	ws, _ := e.b.WriteSubject("sim1", "wr")
	rep := testutil.Request(t, e.nc, ws, `{"value":1}`)
	if !strings.Contains(string(rep.Data), `"ok":true`) {
		t.Fatalf("write to the tag made writable: %s", rep.Data)
	}
	testutil.WaitFor(t, "the tags-changed event", 5*time.Second, func() bool { return rec.event("tags-changed") != nil })
	ev := rec.event("tags-changed")
	if ev["source"] != "sim1" || len(ev["removed"].([]any)) != 1 || ev["removed"].([]any)[0] != "gone" ||
		len(ev["added"].([]any)) != 1 || len(ev["changed"].([]any)) != 3 {
		t.Fatalf("tags-changed event %v", ev)
	}
}

// TestApplyRefusedChangesNothing: a change with problems reports every one
// of them and changes nothing; the same change without them applies
// (the positive control).
// A change that only removes a tag drops the late updates of its item,
// while a kept tag's, sent after them, is published.
func TestApplyRemoveDropsLateUpdates(t *testing.T) {
	e := setup(t, bridge.Config{}, []bridge.TagConfig{{Name: "keep", Address: "ns=1;s=keep"}, {Name: "gone", Address: "ns=1;s=gone"}})
	rec := record(t, e)
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 2 })
	e.src.EmitAll()
	testutil.WaitFor(t, "first updates", 5*time.Second, func() bool { return rec.count("gone") == 1 && rec.count("keep") == 1 })
	before := e.src.SubscribedTags()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.b.Apply(ctx, bridge.Change{Tags: []bridge.TagChanges{{Source: "sim1", Remove: []string{"gone"}}}})
	if err != nil || len(res.Problems) > 0 {
		t.Fatalf("Apply: %v %v", err, res.Problems)
	}
	e.src.Emit(before["gone"].Handle, wire.Update{Value: int64(99), Status: wire.StatusGood})
	e.src.Emit(before["keep"].Handle, wire.Update{Value: int64(99), Status: wire.StatusGood})
	testutil.WaitFor(t, "the kept tag's update", 5*time.Second, func() bool { return rec.count("keep") == 2 })
	if n := rec.count("gone"); n != 1 {
		t.Fatalf("the removed tag published %d updates after Apply", n-1)
	}
}

func TestApplyRefusedChangesNothing(t *testing.T) {
	e := setup(t, bridge.Config{}, tagsN(3, false))
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := bridge.Change{Tags: []bridge.TagChanges{{
		Source: "sim1",
		Add:    []bridge.TagConfig{{Name: "Line1.TX", Address: "x"}, {Name: "clash", Address: "y", Subject: "apbridge.sim1.Line1.TA"}},
		Remove: []string{"Line1.TB", "nosuch"},
	}}, RemoveSources: []string{"other"}}
	_, err := e.b.Apply(ctx, bad)
	if err == nil {
		t.Fatal("a change with problems was applied")
	}
	for _, want := range []string{`remove tag "nosuch": no such tag`, `like tag "Line1.TA"`, `remove source "other"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, ok := e.b.Subject("sim1", "Line1.TX"); ok {
		t.Fatal("a tag of a refused change was added")
	}
	if _, ok := e.b.Subject("sim1", "Line1.TB"); !ok || e.src.Unsubscribed() != 0 {
		t.Fatal("a tag of a refused change was removed")
	}
	good := bridge.Change{Tags: []bridge.TagChanges{{Source: "sim1", Add: []bridge.TagConfig{{Name: "Line1.TX", Address: "x"}}, Remove: []string{"Line1.TB"}}}}
	if _, err := e.b.Apply(ctx, good); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.b.Subject("sim1", "Line1.TX"); !ok {
		t.Fatal("the valid change was not applied")
	}
}

// TestApplySources: a source added to a running bridge starts and
// publishes; one removed is closed alone, its tags leave, and the other
// source's tags see nothing.
func TestApplySources(t *testing.T) {
	e := setup(t, bridge.Config{}, tagsN(2, false))
	rec := record(t, e)
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src2 := simsource.New("sim2")
	if _, err := e.b.Apply(ctx, bridge.Change{AddSources: []bridge.NewSource{{Source: src2, Tags: []bridge.TagConfig{{Name: "a", Address: "ns=1;s=a"}}}}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the added source's tag subscribed", 5*time.Second, func() bool { return src2.Subscribed() == 1 })
	src2.EmitAll()
	e.src.EmitAll()
	testutil.WaitFor(t, "both sources publish", 5*time.Second, func() bool { return rec.count("a") == 1 && rec.count("Line1.TA") == 1 })
	if _, err := e.b.Apply(ctx, bridge.Change{RemoveSources: []string{"sim2"}}); err != nil {
		t.Fatal(err)
	}
	if src2.EmitAll() != 0 {
		t.Fatal("the removed source still emits: not closed")
	}
	if _, ok := e.b.Subject("sim2", "a"); ok || len(e.b.Stats()) != 1 {
		t.Fatal("the removed source is still the bridge's")
	}
	e.src.EmitAll()
	testutil.WaitFor(t, "the remaining source publishes", 5*time.Second, func() bool { return rec.count("Line1.TA") == 2 })
	checkSeq(t, "Line1.TA", rec.updates("Line1.TA"))
	testutil.WaitFor(t, "the source events", 5*time.Second, func() bool {
		return rec.event("source-added") != nil && rec.event("source-removed") != nil
	})
}

// TestApplyDuringSubscribeStorm: a change applied while the source leaves
// subscribes unanswered waits for the guard to give up on the one in
// flight (never two at the source), and its tags are subscribed once the
// source answers again.
func TestApplyDuringSubscribeStorm(t *testing.T) {
	cfg := bridge.Config{Guard: bridge.GuardConfig{RetryFloor: 20 * time.Millisecond, RetryCeiling: 200 * time.Millisecond,
		InFlightCeiling: 300 * time.Millisecond}}
	e := setup(t, cfg, tagsN(3, false))
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 3 })
	e.src.HangSubscribes(true)
	e.src.Restore() // the source lost its subscriptions: the guard asks again, and hangs
	testutil.WaitFor(t, "a subscribe in flight", 5*time.Second, func() bool {
		st := e.b.Stats()
		return st[0].SubscribeInFlight
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.b.Apply(ctx, bridge.Change{Tags: []bridge.TagChanges{{Source: "sim1",
		Add: []bridge.TagConfig{{Name: "added", Address: "ns=1;s=added"}}, Remove: []string{"Line1.TA"}}}}); err != nil {
		t.Fatal(err)
	}
	e.src.HangSubscribes(false)
	testutil.WaitFor(t, "the new set subscribed", 10*time.Second, func() bool {
		st := e.src.SubscribedTags()
		_, gone := st["Line1.TA"]
		_, added := st["added"]
		return added && !gone && len(st) == 3
	})
	if _, max := e.src.Requests(); max > 1 {
		t.Fatalf("%d subscribes in flight at once", max)
	}
}

// TestApplyWhileSubscribeInFlight: tags a change adds while a subscribe
// is out are asked for when it returns, not at the guard's next retry
// (here a minute away, far beyond the wait).
func TestApplyWhileSubscribeInFlight(t *testing.T) {
	cfg := bridge.Config{Guard: bridge.GuardConfig{RetryFloor: time.Minute, RetryCeiling: time.Hour, InFlightCeiling: time.Hour}}
	e := setup(t, cfg, tagsN(2, false))
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 2 })
	e.src.SetSubscribeDelay(500 * time.Millisecond)
	e.src.Restore() // the guard asks again, and the answer takes its time
	testutil.WaitFor(t, "a subscribe in flight", 5*time.Second, func() bool { return e.b.Stats()[0].SubscribeInFlight })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.b.Apply(ctx, bridge.Change{Tags: []bridge.TagChanges{{Source: "sim1",
		Add: []bridge.TagConfig{{Name: "added", Address: "ns=1;s=added"}}}}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the added tag subscribed", 10*time.Second, func() bool {
		_, ok := e.src.SubscribedTags()["added"]
		return ok
	})
	if st := e.b.Stats()[0]; st.SubscribeFailures != 0 {
		t.Fatalf("%d subscribe failures counted for a request that succeeded", st.SubscribeFailures)
	}
}

// TestApplyAddsBeforeRemoving: a change that adds and removes tags of a
// source lets the additions go first: the removal waits until the
// subscribe of the added tag has been answered (a source serving one
// request at a time would otherwise delete before it creates), and Apply
// returns once both are done. The removed tag publishes nothing from the
// commit on, so waiting costs it nothing.
func TestApplyAddsBeforeRemoving(t *testing.T) {
	e := setup(t, bridge.Config{}, tagsN(3, false))
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 3 })
	e.src.SetSubscribeDelay(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.b.Apply(ctx, bridge.Change{Tags: []bridge.TagChanges{{Source: "sim1",
		Add: []bridge.TagConfig{{Name: "added", Address: "ns=1;s=added"}}, Remove: []string{"Line1.TB"}}}})
	if err != nil || len(res.Problems) > 0 {
		t.Fatalf("apply: %v, %v", err, res.Problems)
	}
	if e.src.Unsubscribed() != 1 {
		t.Fatalf("%d tags removed at the source when Apply returned, want 1", e.src.Unsubscribed())
	}
	if _, ok := e.src.SubscribedTags()["added"]; !ok {
		t.Fatal("the removal went to the source before the addition was answered")
	}
}
