package relay

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// TestMxHandoffFencing: a gateway source's handoff in the bucket follows
// the fencing rules of the OPC UA one. A record is not written without a
// valid lease; a successor takes over only a record of an older token
// than its lease's (not its own lease's); and an owner deposed by a newer
// one (its write meets the newer record) writes no more, so the newer
// record stays.
func TestMxHandoffFencing(t *testing.T) {
	js := oneNodeJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(relay string, tok *atomic.Uint64) *handoffStore {
		t.Helper()
		hs, err := openHandoffStore(ctx, js, &FleetConfig{RelayID: relay, Bucket: "fx", Replicas: 1},
			func(string) (uint64, bool) { v := tok.Load(); return v, v != 0 }, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(hs.close)
		return hs
	}
	record := func(hs *handoffStore, token, lastStored uint64) {
		t.Helper()
		st := &fleetMxStore{hs: hs, pair: "gw1", token: token}
		if err := st.RecordHandoff(mxsource.Handoff{Version: 1, Source: "gw1", Endpoint: "gw:1", LastStored: lastStored,
			Items: map[string]int32{"C_0.Value": 7}}); err != nil {
			t.Fatal(err)
		}
		hs.flush()
	}
	var ta, tb atomic.Uint64
	a, b := open("ra", &ta), open("rb", &tb)
	kv, err := js.KeyValue(ctx, HandoffBucket("fx"))
	if err != nil {
		t.Fatal(err)
	}
	stored := func() handoffRecord { return storedRecord(ctx, t, kv, "gw1") }

	// No valid lease: nothing written.
	record(a, 5, 9)
	if rec := stored(); rec.Mx != nil {
		t.Fatalf("a record written without a valid lease: %+v", rec)
	}
	// The lease valid (token 5): written, and the pending one with it.
	ta.Store(5)
	record(a, 5, 10)
	testutil.WaitFor(t, "ra's record", 5*time.Second, func() bool {
		rec := stored()
		return rec.Mx != nil && rec.Mx.LastStored == 10 && rec.Token == 5 && rec.Relay == "ra"
	})
	if h := b.mxTakeover("gw1", 5); h != nil {
		t.Fatalf("a record of the successor's own lease taken over: %+v", h)
	}
	h := b.mxTakeover("gw1", 6)
	if h == nil || h.LastStored != 10 || h.Items["C_0.Value"] != 7 {
		t.Fatalf("the record of an older lease not taken over: %+v", h)
	}
	// rb owns under token 6; ra, deposed, still sees its lease valid.
	tb.Store(6)
	record(b, 6, 20)
	testutil.WaitFor(t, "rb's record", 5*time.Second, func() bool { return stored().Token == 6 })
	record(a, 5, 30)
	a.flush()
	testutil.WaitFor(t, "ra deposed", 5*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.entries["gw1"].deposed
	})
	record(a, 5, 40)
	if rec := stored(); rec.Token != 6 || rec.Relay != "rb" || rec.Mx == nil || rec.Mx.LastStored != 20 {
		t.Fatalf("the deposed owner overwrote the newer record: %+v", rec)
	}
	if a.recording("gw1") {
		t.Fatal("the deposed owner still counts as recording")
	}
	if !b.recording("gw1") {
		t.Fatal("the owner does not count as recording")
	}
}

// TestMxHandoffNewSessionAtOnce: a record naming another gateway session
// than the last (a promoted standby) is written without the writer's
// pause, which the bucket's writer otherwise keeps between writes: with
// the pause, an owner killed just after a promotion left a record naming
// the session gone with its gateway, and its successor fell back. The
// pause here is an hour, so that only the cut writes it; the positive
// control is the first record, written at once (nothing paused before).
func TestMxHandoffNewSessionAtOnce(t *testing.T) {
	js := oneNodeJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hs, err := openHandoffStore(ctx, js, &FleetConfig{RelayID: "ra", Bucket: "fy", Replicas: 1},
		func(string) (uint64, bool) { return 5, true }, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	hs.interval = time.Hour
	t.Cleanup(hs.close)
	kv, err := js.KeyValue(ctx, HandoffBucket("fy"))
	if err != nil {
		t.Fatal(err)
	}
	stored := func() handoffRecord { return storedRecord(ctx, t, kv, "gw1") }
	st := &fleetMxStore{hs: hs, pair: "gw1", token: 5}
	record := func(session, endpoint string, lastStored uint64) {
		t.Helper()
		h := mxsource.Handoff{Version: 1, Source: "gw1", Endpoint: endpoint, LastStored: lastStored}
		h.Session.ID = session
		if err := st.RecordHandoff(h); err != nil {
			t.Fatal(err)
		}
	}
	record("mxgw-1/1/1", "gw:1", 10)
	testutil.WaitFor(t, "the first record", 5*time.Second, func() bool {
		rec := stored()
		return rec.Mx != nil && rec.Mx.Session.ID == "mxgw-1/1/1" && rec.Mx.LastStored == 10
	})
	// The writer pauses now; the active session moves to the other
	// gateway.
	record("mxgw-2/1/2", "gw:2", 3)
	testutil.WaitFor(t, "the promoted session's record, before the writer's pause ends", 5*time.Second, func() bool {
		rec := stored()
		return rec.Mx != nil && rec.Mx.Session.ID == "mxgw-2/1/2" && rec.Mx.LastStored == 3 && rec.Serving == "gw:2"
	})
}

// storedRecord reads key's handoff record from kv: the zero record when
// there is none.
func storedRecord(ctx context.Context, t *testing.T, kv jetstream.KeyValue, key string) (rec handoffRecord) {
	t.Helper()
	en, err := kv.Get(ctx, key)
	if err != nil {
		return rec
	}
	if err := json.Unmarshal(en.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// oneNodeJetStream starts a one-node cluster with JetStream and returns
// a JetStream context on it.
func oneNodeJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	return testutil.JetStream(t, testutil.StartCluster(t, natstest.WithJetStream(), natstest.WithNodes(1)).Node(0).URL())
}
