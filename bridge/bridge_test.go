package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	cl   *natstest.Cluster
	conn *apconn.Conn
	nc   *nats.Conn // a plain consumer
	src  *simsource.Source
	b    *bridge.Bridge
}

func setup(t *testing.T, cfg bridge.Config, tags []bridge.TagConfig, clusterOpts ...natstest.Option) *env {
	t.Helper()
	cl, conn := testutil.ClusterConn(t, clusterOpts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(cl.Node(len(cl.Nodes()) - 1).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	src := simsource.New("sim1")
	b, err := bridge.New(conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddSource(src, tags); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &env{cl: cl, conn: conn, nc: nc, src: src, b: b}
}

// singleNodeConn is an ApConnection on a one-node cluster, for tests that
// need a broker but no switch.
func singleNodeConn(t *testing.T) *apconn.Conn {
	t.Helper()
	_, conn := testutil.ClusterConn(t, natstest.WithNodes(1))
	return conn
}

func tagsN(n int, writable bool) []bridge.TagConfig {
	out := make([]bridge.TagConfig, n)
	for i := range out {
		out[i] = bridge.TagConfig{Name: "Line1.T" + string(rune('A'+i)), Address: "ns=1;s=T" + string(rune('A'+i)), Writable: writable}
	}
	return out
}

func TestUpdatesArriveWithValueQualityAndTimes(t *testing.T) {
	e := setup(t, bridge.Config{}, tagsN(3, false))
	msgs := make(chan *nats.Msg, 100)
	if _, err := e.nc.ChanSubscribe("apbridge.sim1.>", msgs); err != nil {
		t.Fatal(err)
	}
	testutil.WaitInterest(t, e.nc, e.conn)
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 3 })
	src := time.Date(2026, 11, 30, 1, 2, 3, 4000, time.UTC)
	e.src.Emit(2, wire.Update{Value: 21.5, Status: wire.StatusGood, SourceTime: src, ServerTime: src.Add(time.Millisecond)})
	e.src.Emit(2, wire.Update{Value: 22.5, Status: wire.StatusUncertain, SourceTime: src.Add(time.Second)})
	e.src.Emit(1, wire.Update{Value: struct{ X int }{1}, Status: wire.StatusGood, SourceTime: src})

	var got []*nats.Msg
	for len(got) < 3 {
		select {
		case m := <-msgs:
			got = append(got, m)
		case <-time.After(5 * time.Second):
			t.Fatalf("got %d updates", len(got))
		}
	}
	byTag := map[string][]wire.Update{}
	for _, m := range got {
		u, err := wire.DecodeJSON(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		byTag[u.Tag] = append(byTag[u.Tag], u)
		if m.Header.Get(wire.HeaderQuality) != u.Status.Quality().String() || m.Header.Get(wire.HeaderSeq) != strconv.FormatUint(u.Seq, 10) ||
			m.Header.Get(wire.HeaderEpoch) == "" {
			t.Errorf("headers %v do not match payload %s", m.Header, m.Data)
		}
	}
	b := byTag["Line1.TB"]
	if len(b) != 2 || m0(b).Value != 21.5 || b[0].Seq != 1 || b[1].Seq != 2 || !b[0].SourceTime.Equal(src) ||
		!b[0].ServerTime.Equal(src.Add(time.Millisecond)) || b[1].Status.Quality() != wire.QualityUncertain {
		t.Fatalf("Line1.TB updates %+v", b)
	}
	a := byTag["Line1.TA"]
	if len(a) != 1 || a[0].Status.Quality() != wire.QualityBad || a[0].Value != nil || !strings.Contains(a[0].Err, "unsupported") {
		t.Fatalf("unsupported value reported as %+v", a)
	}
	if s, _ := e.b.Subject("sim1", "Line1.TB"); got[0].Subject != s && got[1].Subject != s && got[2].Subject != s {
		t.Fatalf("subject %s not used", s)
	}
}

func m0(u []wire.Update) wire.Update { return u[0] }

func TestSnapshotPages(t *testing.T) {
	e := setup(t, bridge.Config{SnapshotPage: 2}, tagsN(5, false))
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 5 })
	e.src.EmitAll()
	e.src.EmitAll()
	testutil.WaitFor(t, "published", 5*time.Second, func() bool { return e.b.Stats()[0].Published == 10 })
	var all []wire.Update
	after := ""
	for page := 0; ; page++ {
		req, _ := json.Marshal(wire.SnapshotRequest{After: after})
		m := testutil.Request(t, e.nc, "apbridge.snapshot", string(req))
		var rep wire.SnapshotReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("%s: %v", m.Data, err)
		}
		if len(rep.Updates) > 2 {
			t.Fatalf("page of %d, limit 2", len(rep.Updates))
		}
		for _, raw := range rep.Updates {
			u, err := wire.DecodeJSON(raw)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, u)
		}
		if rep.Next == "" {
			break
		}
		after = rep.Next
	}
	if len(all) != 5 {
		t.Fatalf("snapshot has %d tags, want 5", len(all))
	}
	for _, u := range all {
		if u.Value != int64(2) || u.Seq != 2 {
			t.Errorf("snapshot of %s = %v seq %d, want the last value 2", u.Tag, u.Value, u.Seq)
		}
	}
	// A filter by a prefix that matches nothing is an empty answer.
	m := testutil.Request(t, e.nc, "apbridge.snapshot", `{"source":"sim1","prefix":"nothing."}`)
	if !strings.Contains(string(m.Data), `"updates":[]`) || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("filtered snapshot %s", m.Data)
	}
	// What would look like an empty answer but is a mistake is an error,
	// with a JSON body.
	for _, c := range []struct{ body, code, want string }{
		{`{"limit":`, "400", "snapshot request: unexpected EOF"},
		{`{"source":"other"}`, "404", `source: \"other\" is not a source of this relay (valid: sim1)`},
		{`{"limit":-1}`, "400", "limit: -1 is out of range (valid 0-2; 0 means 2)"},
		{`{"sorce":"sim1"}`, "400", `unknown field \"sorce\"`},
		{`{"limit":1} {"limit":2}`, "400", "data after the JSON object"},
		{`[1]`, "400", "snapshot request: json: cannot unmarshal array"},
	} {
		m = testutil.Request(t, e.nc, "apbridge.snapshot", c.body)
		var er wire.ErrorReply
		if m.Header.Get("Nats-Service-Error-Code") != c.code || json.Unmarshal(m.Data, &er) != nil || er.Code != c.code || !strings.Contains(string(m.Data), c.want) {
			t.Errorf("snapshot %s answered %v %s; want %s with %q", c.body, m.Header, m.Data, c.code, c.want)
		}
	}
}

func TestWriteBack(t *testing.T) {
	tags := []bridge.TagConfig{
		{Name: "SP1", Address: "ns=1;s=SP1", Writable: true},
		{Name: "RO", Address: "ns=1;s=RO"},
		{Name: "SrvRO", Address: "ro:x", Writable: true},
	}
	e := setup(t, bridge.Config{}, tags)
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 3 })
	e.src.EmitAll() // counters: the tags' type is Int64 now
	testutil.WaitFor(t, "published", 5*time.Second, func() bool { return e.b.Stats()[0].Published == 3 })
	ws, _ := e.b.WriteSubject("sim1", "SP1")

	type tc struct {
		name, subj, body string
		code             string // micro error code, "" for success
		contains         string
	}
	ro, _ := e.b.WriteSubject("sim1", "RO")
	srvro, _ := e.b.WriteSubject("sim1", "SrvRO")
	cases := []tc{
		{"typed by last value", ws, `{"value": 42}`, "", `"ok":true`},
		{"bare value", ws, `43`, "", `"ok":true`},
		{"explicit type", ws, `{"value": "44", "type": "Int64"}`, "", `"ok":true`},
		{"wrong type", ws, `{"value": "abc"}`, "400", "not a Int64"},
		{"not JSON", ws, `{"value": 4`, "400", "malformed"},
		{"no value", ws, `{"type":"Int64"}`, "400", `no \"value\"`},
		{"garbage", ws, `hello`, "400", "not JSON"},
		{"read-only tag", ro, `1`, "403", "read-only"},
		{"server refuses", srvro, `1`, "502", "0x803B0000"},
		{"unknown tag", "apbridge.write.apbridge.sim1.Nope", `1`, "404", "no tag"},
		{"unknown field", ws, `{"valu": 1}`, "400", `unknown field \"valu\"`},
		{"empty body", ws, ``, "400", "the value (0 bytes) is not JSON"},
		// A reply never repeats the value, so an error for any value the
		// broker carries fits in a reply (this one would not).
		{"huge garbage", ws, strings.Repeat("x", 900<<10), "400", "the value (921600 bytes) is not JSON"},
	}
	for _, c := range cases {
		m := testutil.Request(t, e.nc, c.subj, c.body)
		code := m.Header.Get("Nats-Service-Error-Code")
		if code != c.code || !strings.Contains(string(m.Data)+m.Header.Get("Nats-Service-Error"), c.contains) {
			t.Errorf("%s: code %q body %s (%s), want code %q containing %q", c.name, code, m.Data, m.Header.Get("Nats-Service-Error"), c.code, c.contains)
		}
	}
	for _, body := range []string{`{"value": "hunter2-secret"}`, `"hunter2-secret"`, `{"value": ["hunter2-secret"], "type": "Double[]"}`} {
		m := testutil.Request(t, e.nc, ws, body)
		if m.Header.Get("Nats-Service-Error-Code") != "400" || strings.Contains(string(m.Data)+m.Header.Get("Nats-Service-Error"), "hunter2") {
			t.Errorf("write %s answered %v %s: want 400 without the value", body, m.Header, m.Data)
		}
	}
	got := e.src.Writes()
	if len(got) != 3 || got[0].Value != int64(42) || got[1].Value != int64(43) || got[2].Value != int64(44) {
		t.Fatalf("writes at the source: %+v", got)
	}
	// The source says it may not be written now (a standby): refused.
	e.src.SetHealth(bridge.Health{State: bridge.StateDegraded, Level: 90, Writable: false})
	m := testutil.Request(t, e.nc, ws, `45`)
	if m.Header.Get("Nats-Service-Error-Code") != "503" || len(e.src.Writes()) != 3 {
		t.Fatalf("write on a standby answered %v %s", m.Header, m.Data)
	}
}

func TestStatusAndMicroSurviveSwitch(t *testing.T) {
	e := setup(t, bridge.Config{Instance: "site1", Version: "1.2.3-rc.1", Metadata: map[string]string{"revision": "abc123", "instance": "not this"}}, tagsN(2, false))
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 2 })
	check := func() bridge.Status {
		m := testutil.Request(t, e.nc, "apbridge.status", "")
		var st bridge.Status
		if err := json.Unmarshal(m.Data, &st); err != nil {
			t.Fatalf("%s: %v", m.Data, err)
		}
		return st
	}
	st := check()
	if st.Instance != "site1" || len(st.Sources) != 1 || st.Sources[0].Tags != 2 || st.NATS.Active == nil || st.NATS.Status != "connected" {
		t.Fatalf("status %+v", st)
	}
	info := testutil.Request(t, e.nc, "$SRV.INFO.apbridge", "")
	if !strings.Contains(string(info.Data), `"write"`) || !strings.Contains(string(info.Data), `apbridge.write.\u003e`) {
		t.Fatalf("micro info %s", info.Data)
	}
	// The build's version and metadata; the bridge's own keys win.
	var mi struct {
		Version  string
		Metadata map[string]string
	}
	json.Unmarshal(info.Data, &mi)
	if mi.Version != "1.2.3-rc.1" || mi.Metadata["revision"] != "abc123" || mi.Metadata["instance"] != "site1" || mi.Metadata["prefix"] != "apbridge" {
		t.Errorf("micro info version %q, metadata %v", mi.Version, mi.Metadata)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.conn.SwitchToPassive(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "status after the switch", 5*time.Second, func() bool {
		m, err := e.nc.Request("apbridge.status", nil, time.Second)
		if err != nil {
			return false
		}
		var st bridge.Status
		return json.Unmarshal(m.Data, &st) == nil && st.NATS.LastSwitch != nil && st.NATS.LastSwitch.Cause == "manual"
	})
	testutil.Request(t, e.nc, "$SRV.PING.apbridge", "")
}

func TestSubscribeGuardAgainstHangingSource(t *testing.T) {
	guard := bridge.GuardConfig{RetryFloor: 50 * time.Millisecond, RetryCeiling: 400 * time.Millisecond,
		InFlightCeiling: 300 * time.Millisecond, Jitter: 0}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := singleNodeConn(t)
	src := simsource.New("slow")
	src.HangSubscribes(true)
	b, err := bridge.New(conn, bridge.Config{Guard: guard})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddSource(src, tagsN(4, false)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Unanswered: one request per in-flight ceiling, never two at once.
	testutil.WaitFor(t, "three requests", 5*time.Second, func() bool { n, _ := src.Requests(); return n >= 3 })
	elapsed := time.Since(start)
	n, maxIn := src.Requests()
	if maxIn != 1 {
		t.Fatalf("%d requests in flight at once", maxIn)
	}
	if limit := int64(elapsed/guard.InFlightCeiling) + 1; n > limit {
		t.Fatalf("%d requests in %v, more than one per %v", n, elapsed, guard.InFlightCeiling)
	}
	if st := b.Stats()[0]; st.LostReplies < 2 {
		t.Fatalf("lost replies %d", st.LostReplies)
	}
	// Positive control: once the source answers, everything subscribes.
	src.HangSubscribes(false)
	testutil.WaitFor(t, "subscribed", 5*time.Second, func() bool { return src.Subscribed() == 4 })
	testutil.WaitFor(t, "no request in flight", 5*time.Second, func() bool { return !b.Stats()[0].SubscribeInFlight })
	before, _ := src.Requests()
	// A restored connection resubscribes everything, once.
	src.Restore()
	testutil.WaitFor(t, "resubscribed", 5*time.Second, func() bool { return src.Subscribed() == 4 })
	if after, _ := src.Requests(); after != before+1 {
		t.Fatalf("restore sent %d requests, want 1", after-before)
	}
}

func TestBadTagsRetriedWithBackoff(t *testing.T) {
	guard := bridge.GuardConfig{RetryFloor: 20 * time.Millisecond, RetryCeiling: 80 * time.Millisecond,
		InFlightCeiling: time.Second, Jitter: 0}
	tags := append(tagsN(2, false), bridge.TagConfig{Name: "Missing", Address: "bad:nope"})
	e := setup(t, bridge.Config{Guard: guard}, tags, natstest.WithNodes(2))
	testutil.WaitFor(t, "good tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 2 })
	testutil.WaitFor(t, "retries", 5*time.Second, func() bool { n, _ := e.src.Requests(); return n >= 5 })
	st := e.b.Stats()[0]
	if st.Failed != 1 || st.SubscribeFailures < 4 {
		t.Fatalf("stats %+v", st)
	}
	// The backoff reached its ceiling: no faster than one retry per 80 ms.
	n1, _ := e.src.Requests()
	time.Sleep(400 * time.Millisecond) // measure a rate over a fixed span, not a wait for a condition
	n2, _ := e.src.Requests()
	if n2-n1 > 6 {
		t.Fatalf("%d retries in 400 ms with an 80 ms ceiling", n2-n1)
	}
}

func TestConfigErrors(t *testing.T) {
	conn := singleNodeConn(t)
	if _, err := bridge.New(conn, bridge.Config{Subject: "a.*.{tag}"}); err == nil {
		t.Error("wildcard template accepted")
	}
	if _, err := bridge.New(conn, bridge.Config{Prefix: "a b"}); err == nil {
		t.Error("bad prefix accepted")
	}
	// Its events would be published in a key-value bucket.
	if _, err := bridge.New(conn, bridge.Config{Prefix: "$KV.plant"}); err == nil || !strings.Contains(err.Error(), `reserved subject space "$KV.>"`) {
		t.Errorf("a prefix in a reserved subject space: %v", err)
	}
	b, err := bridge.New(conn, bridge.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		tags []bridge.TagConfig
		want string
	}{
		{[]bridge.TagConfig{{Name: ""}}, "tags[0]: name is empty"},
		{[]bridge.TagConfig{{Name: "A"}, {Name: "A"}}, `tag "A" is listed twice`},
		{[]bridge.TagConfig{{Name: "A.B"}, {Name: "A/B"}}, `tag "A/B" maps to subject`},
		{[]bridge.TagConfig{{Name: "A", Subject: "x..y"}}, `tag "A"`},
		{[]bridge.TagConfig{{Name: "..."}}, `tag "..."`},
		// A tag's update there would delete a stream, or answer another
		// client's request.
		{[]bridge.TagConfig{{Name: "A", Subject: "$JS.API.STREAM.DELETE.PLANT"}}, `tag "A": subject "$JS.API.STREAM.DELETE.PLANT" is in the reserved subject space "$JS.API.>"`},
		{[]bridge.TagConfig{{Name: "B", Subject: "_INBOX.x"}}, `reserved subject space "_INBOX.>"`},
	}
	for i, c := range cases {
		err := b.AddSource(simsource.New("s"+string(rune('a'+i))), c.tags)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: %v, want %q", i, err, c.want)
		}
	}
}

// TestNoUpdateLostThroughLDM relays 20 tags at 100 Hz while the
// connection's broker goes lame-duck, and checks every tag's sequence.
func TestNoUpdateLostThroughLDM(t *testing.T) {
	e := setup(t, bridge.Config{}, tagsN(20, false), natstest.WithLameDuck(2500*time.Millisecond, 1500*time.Millisecond))
	// The consumer sits on the broker that is neither active nor passive:
	// a plain nats.go consumer on the lame-duck broker would itself ride
	// it down and miss messages while it reconnects.
	a, _ := e.conn.ActiveServer()
	p, _ := e.conn.PassiveServer()
	for _, n := range e.cl.Nodes() {
		if n.ServerID() != a.ID && n.ServerID() != p.ID {
			nc, err := nats.Connect(n.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			e.nc = nc
		}
	}
	var mu sync.Mutex
	last := map[string]uint64{}
	gaps := 0
	if _, err := e.nc.Subscribe("apbridge.sim1.>", func(m *nats.Msg) {
		u, err := wire.DecodeJSON(m.Data)
		if err != nil {
			return
		}
		mu.Lock()
		if u.Seq != last[u.Tag]+1 {
			gaps++
		}
		last[u.Tag] = u.Seq
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitInterest(t, e.nc, e.conn)
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return e.src.Subscribed() == 20 })
	e.src.Run(10 * time.Millisecond)
	testutil.WaitFor(t, "traffic", 5*time.Second, func() bool { return e.b.Stats()[0].Published > 200 })
	done := e.cl.NodeByServerID(a.ID).EnterLameDuck()
	<-done
	testutil.WaitFor(t, "traffic after eviction", 5*time.Second, func() bool { return e.b.Stats()[0].Published > 4000 })
	e.src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.conn.Flush(ctx)
	counts := e.src.Counts()
	testutil.WaitFor(t, "every update", 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for h, n := range counts {
			if last["Line1.T"+string(rune('A'+h-1))] != n {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	if gaps != 0 {
		t.Fatalf("%d sequence gaps or repeats", gaps)
	}
}

// TestCloseRacingASwitch: a switch whose event reaches the bridge after
// Close must not start the service again on the new active. The
// connection's dispatcher takes its list of handlers before it runs them,
// so a handler removed by Close can still be called afterwards with an
// event that was under way.
func TestCloseRacingASwitch(t *testing.T) {
	e := setup(t, bridge.Config{}, tagsN(1, false))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		prefix := fmt.Sprintf("race%d", i)
		// Handlers run one after another in the order they were added.
		// The first holds the switch's event back until Close has
		// returned; the last, added after the bridge's own, reports that
		// the event has gone past the bridge's handler.
		closed := make(chan struct{})
		stopGate := e.conn.OnEvent(func(ev apconn.Event) {
			if ev.Kind == apconn.EventSwitched {
				<-closed
			}
		})
		b, err := bridge.New(e.conn, bridge.Config{Instance: prefix, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		seen := make(chan struct{})
		stopSeen := e.conn.OnEvent(func(ev apconn.Event) {
			if ev.Kind == apconn.EventSwitched {
				close(seen)
			}
		})
		answers := func() bool {
			_, err := e.nc.Request(prefix+".status", nil, 200*time.Millisecond)
			return err == nil
		}
		// The control: it answers, once its interest has crossed the routes.
		testutil.WaitFor(t, "the service to answer", 5*time.Second, answers)
		testutil.WaitFor(t, "a passive", 10*time.Second, func() bool { _, ok := e.conn.PassiveServer(); return ok })
		if err := e.conn.SwitchToPassive(ctx); err != nil {
			t.Fatal(err)
		}
		b.Close()
		close(closed)
		select {
		case <-seen:
		case <-ctx.Done():
			t.Fatal("the switch event never went past the bridge's handler")
		}
		stopGate()
		stopSeen()
		// Stopping is not instant (the unsubscribe crosses the routes); a
		// service started again after Close would answer for good.
		testutil.WaitFor(t, fmt.Sprintf("round %d: the closed bridge's service to stop answering", i), 5*time.Second,
			func() bool { return !answers() })
	}
}

// boundedSource is a hanging source that says how long its subscribe may
// take (a gateway's command deadline).
type boundedSource struct {
	*simsource.Source
	bound time.Duration
}

func (s boundedSource) SubscribeReplyBound() time.Duration { return s.bound }

// A source's reply bound raises the guard's in-flight ceiling: no second
// request while the first may still be answered. The positive control is
// the same source without the bound, presumed lost at the ceiling.
func TestReplyBoundRaisesTheInFlightCeiling(t *testing.T) {
	guard := bridge.GuardConfig{RetryFloor: 50 * time.Millisecond, RetryCeiling: 400 * time.Millisecond,
		InFlightCeiling: 100 * time.Millisecond, Jitter: 0}
	conn := singleNodeConn(t)
	run := func(src bridge.Source, sim *simsource.Source) int64 {
		sim.HangSubscribes(true)
		b, err := bridge.New(conn, bridge.Config{Guard: guard, Prefix: "apbridge." + src.Name()})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.AddSource(src, tagsN(2, false)); err != nil {
			t.Fatal(err)
		}
		if err := b.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Ten ceilings' time, measured as requests of the unbounded run.
		testutil.WaitFor(t, "the guard waiting", 5*time.Second, func() bool { return b.Stats()[0].SubscribeInFlight })
		deadline := time.NewTimer(time.Second)
		<-deadline.C
		n, _ := sim.Requests()
		sim.HangSubscribes(false)
		return n
	}
	plain := simsource.New("plain")
	if n := run(plain, plain); n < 3 {
		t.Fatalf("positive control: %d requests in 1 s at a 100 ms ceiling", n)
	}
	sim := simsource.New("bounded")
	if n := run(boundedSource{sim, time.Minute}, sim); n != 1 {
		t.Fatalf("%d requests within the source's reply bound, want 1", n)
	}
}

// TestWriteLogged: a write that reaches the source is logged at info with
// its tag, status and user, and never its value; the value is at debug.
func TestWriteLogged(t *testing.T) {
	conn := singleNodeConn(t)
	for _, level := range []zerolog.Level{zerolog.InfoLevel, zerolog.DebugLevel} {
		var logs testutil.SyncBuffer
		src := simsource.New("sim1")
		b, err := bridge.New(conn, bridge.Config{Prefix: fmt.Sprintf("lg%d", level)}, bridge.WithLogger(zerolog.New(&logs).Level(level)))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AddSource(src, []bridge.TagConfig{{Name: "SP1", Address: "ns=1;s=SP1", Writable: true}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = b.Start(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		ws, _ := b.WriteSubject("sim1", "SP1")
		m := testutil.Request(t, conn.Active(), ws, `{"value": 4242424, "type": "Int64"}`)
		b.Close()
		if m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("write answered %v %s", m.Header, m.Data)
		}
		out := logs.String()
		if !strings.Contains(out, `"tag":"SP1","user":"unknown","identity":"none","status":"0x00000000","message":"write-back"`) {
			t.Errorf("no write-back line with tag, user and status:\n%s", out)
		}
		// Positive control at debug: the value is there.
		if got := strings.Contains(out, "4242424"); got != (level == zerolog.DebugLevel) {
			t.Errorf("at %v the value is logged: %v\n%s", level, got, out)
		}
	}
}

// linkSource reports link recoveries as a source that rides out blips does.
type linkSource struct {
	*simsource.Source
	recovered, republished uint64
}

func (s linkSource) LinkRecoveries() (uint64, uint64) { return s.recovered, s.republished }

// A LinkReporter's counts reach the source's stats (and so the status
// reply and the metrics); a source without them reports 0.
func TestLinkRecoveriesInStats(t *testing.T) {
	conn := singleNodeConn(t)
	b, err := bridge.New(conn, bridge.Config{Prefix: "apbridge.links"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.AddSource(linkSource{simsource.New("blips"), 3, 41}, tagsN(1, false)); err != nil {
		t.Fatal(err)
	}
	if err := b.AddSource(simsource.New("plain"), tagsN(1, false)); err != nil {
		t.Fatal(err)
	}
	for _, s := range b.Stats() {
		want := [2]uint64{}
		if s.Name == "blips" {
			want = [2]uint64{3, 41}
		}
		if got := [2]uint64{s.LinkRecoveries, s.Republished}; got != want {
			t.Errorf("source %s: recoveries and republished %v, want %v", s.Name, got, want)
		}
	}
}
