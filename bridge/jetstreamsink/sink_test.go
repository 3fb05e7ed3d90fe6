package jetstreamsink_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/nats-io/jsm.go"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// jsRelay is one relay: an ApConnection, a JetStream sink and a bridge on
// a view of a shared source.
type jsRelay struct {
	conn *apconn.Conn
	sink *jetstreamsink.Sink
	b    *bridge.Bridge
	view *simsource.Relay
}

func jsTags(n int) []bridge.TagConfig {
	out := make([]bridge.TagConfig, n)
	for i := range out {
		out[i] = bridge.TagConfig{Name: fmt.Sprintf("Line1.T%02d", i), Address: fmt.Sprintf("ns=1;s=T%02d", i)}
	}
	return out
}

func startJSCluster(t *testing.T, opts ...natstest.Option) *natstest.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := natstest.Start(ctx, append([]natstest.Option{natstest.WithJetStream()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func startRelay(t *testing.T, cl *natstest.Cluster, src *simsource.Shared, cfg jetstreamsink.Config,
	tags []bridge.TagConfig, log zerolog.Logger) *jsRelay {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := &jsRelay{view: src.Relay()}
	var err error
	if r.conn, err = apconn.Connect(ctx, cl.URLs()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.conn.Close)
	if r.sink, err = jetstreamsink.New(ctx, r.conn, cfg, jetstreamsink.WithLogger(log)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.sink.Close() })
	if r.b, err = bridge.New(r.conn, bridge.Config{}, bridge.WithSink(r.sink)); err != nil {
		t.Fatal(err)
	}
	if err := r.b.AddSource(r.view, tags); err != nil {
		t.Fatal(err)
	}
	if err := r.b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.b.Shutdown(ctx)
	})
	return r
}

// kill stops the relay as a crash would: what it had not relayed or not
// had acknowledged is gone with it.
func (r *jsRelay) kill() {
	r.view.Kill()
	r.sink.Close()
	r.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.b.Shutdown(ctx)
}

func (r *jsRelay) acked() uint64 { return r.sink.Stats().Acked }

// flushAudit waits for the stream to acknowledge everything the relay
// published, then audits the stream.
func (r *jsRelay) flushAudit(t *testing.T, cl *natstest.Cluster, src *simsource.Shared, stream string) natstest.StreamAudit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := r.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return audit(t, cl, src, r.b, stream)
}

// audit reads the stream back and compares it with what src produced.
func audit(t *testing.T, cl *natstest.Cluster, src *simsource.Shared, b *bridge.Bridge, stream string) natstest.StreamAudit {
	t.Helper()
	stored := readStored(t, cl, stream)
	expected := src.ExpectedIDs(func(tag string) string { s, _ := b.Subject(src.Name(), tag); return s })
	return natstest.Audit(expected, stored)
}

// readStored reads every message of the stream, from a running node.
func readStored(t *testing.T, cl *natstest.Cluster, stream string) []natstest.StoredMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var nc *nats.Conn
	for _, n := range cl.Nodes() {
		if n.Running() {
			c, err := nats.Connect(n.URL())
			if err == nil {
				nc = c
				break
			}
		}
	}
	if nc == nil {
		t.Fatal("no node to read the stream from")
	}
	defer nc.Close()
	stored, err := natstest.ReadStream(ctx, nc, stream)
	if err != nil {
		t.Fatal(err)
	}
	return stored
}

// stepDownTo moves the stream's leadership to the node named preferred, or
// away from the node named avoid.
func stepDownTo(t *testing.T, cl *natstest.Cluster, stream, preferred, avoid string) *natstest.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := nats.Connect(strings.Join(cl.URLs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	mgr, err := jsm.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for {
		leader, err := cl.StreamLeader(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if (preferred == "" || leader.Name() == preferred) && leader.Name() != avoid {
			return leader
		}
		st, err := mgr.LoadStream(stream)
		if err == nil {
			var p *api.Placement
			if preferred != "" {
				p = &api.Placement{Preferred: preferred}
			}
			err = st.LeaderStepDown(p)
		}
		if err != nil && ctx.Err() != nil {
			t.Fatalf("stream leader not moved: %v", err)
		}
		testutil.WaitFor(t, "a new stream leader", 10*time.Second, func() bool {
			n, err := cl.StreamLeader(ctx, stream)
			return err == nil && n != leader
		})
	}
}

// TestJetStreamExactlyOnceThroughFailover relays 10 tags at 2,000
// updates/s into an R3 stream through each failover cause in turn, and
// audits the stream after each: every update exactly once, in order per
// tag.
func TestJetStreamExactlyOnceThroughFailover(t *testing.T) {
	cl := startJSCluster(t, natstest.WithLameDuck(1500*time.Millisecond, 500*time.Millisecond))
	causes := []struct {
		name string
		// hit returns the node it faulted and a channel closed once the
		// node is down.
		hit func(t *testing.T, r *jsRelay, stream string) (*natstest.Node, <-chan struct{})
	}{
		{"ldm-stream-leader", func(t *testing.T, r *jsRelay, stream string) (*natstest.Node, <-chan struct{}) {
			a, _ := r.conn.ActiveServer()
			n := stepDownTo(t, cl, stream, "", a.Name) // the leader, not the bridge's broker
			return n, n.EnterLameDuck()
		}},
		{"ldm-active-broker", func(t *testing.T, r *jsRelay, stream string) (*natstest.Node, <-chan struct{}) {
			a, _ := r.conn.ActiveServer()
			stepDownTo(t, cl, stream, "", a.Name) // the bridge's broker, not the leader
			n := cl.NodeByServerID(a.ID)
			return n, n.EnterLameDuck()
		}},
		{"kill-leader-and-active", func(t *testing.T, r *jsRelay, stream string) (*natstest.Node, <-chan struct{}) {
			a, _ := r.conn.ActiveServer()
			n := stepDownTo(t, cl, stream, a.Name, "") // both at once
			n.Kill()
			done := make(chan struct{})
			close(done)
			return n, done
		}},
	}
	for i, c := range causes {
		t.Run(c.name, func(t *testing.T) {
			src := simsource.NewShared(fmt.Sprintf("src%d", i))
			stream := fmt.Sprintf("FAILOVER%d", i)
			cfg := jetstreamsink.Config{Stream: stream, AckTimeout: 500 * time.Millisecond, HealthInterval: 200 * time.Millisecond}
			r := startRelay(t, cl, src, cfg, jsTags(10), zerolog.Nop())
			testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return src.Sim().Subscribed() == 10 })
			src.Sim().Run(5 * time.Millisecond)
			testutil.WaitFor(t, "traffic", 10*time.Second, func() bool { return r.acked() > 500 })

			node, down := c.hit(t, r, stream)
			select {
			case <-down:
			case <-time.After(15 * time.Second):
				t.Fatal("the node did not go down")
			}
			before := r.acked()
			testutil.WaitFor(t, "traffic after the fault", 15*time.Second, func() bool { return r.acked() > before+1000 })
			src.Close()
			testutil.WaitFor(t, "the relay handed everything", 15*time.Second, r.view.Idle)
			a := r.flushAudit(t, cl, src, stream)
			st := r.sink.Stats()
			t.Logf("%s: %v; sink %+v", c.name, a, st)
			if !a.OK() || a.Expected == 0 {
				t.Fatalf("stream audit: %v", a)
			}
			if ready, why := r.sink.Ready(); !ready {
				t.Logf("not ready after the fault (node %s down): %v", node.Name(), why)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := node.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if err := cl.WaitStreamCurrent(ctx, stream); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestJetStreamHotHot runs two relays on one source into one stream and
// kills one of them mid-run: the stream holds one copy of every update.
func TestJetStreamHotHot(t *testing.T) {
	cl := startJSCluster(t)
	src := simsource.NewShared("hot")
	cfg := jetstreamsink.Config{Stream: "HOTHOT", AckTimeout: 500 * time.Millisecond}
	a := startRelay(t, cl, src, cfg, jsTags(10), zerolog.Nop())
	b := startRelay(t, cl, src, cfg, jsTags(10), zerolog.Nop())
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return src.Sim().Subscribed() == 10 })
	src.Sim().Run(5 * time.Millisecond)
	testutil.WaitFor(t, "traffic through both", 10*time.Second, func() bool { return a.acked() > 500 && b.acked() > 500 })
	a.kill()
	before := b.acked()
	testutil.WaitFor(t, "traffic after the kill", 10*time.Second, func() bool { return b.acked() > before+1000 })
	src.Close()
	testutil.WaitFor(t, "the relay handed everything", 15*time.Second, b.view.Idle)
	au := b.flushAudit(t, cl, src, "HOTHOT")
	sa, sb := a.sink.Stats(), b.sink.Stats()
	t.Logf("audit %v; relay A %+v; relay B %+v", au, sa, sb)
	if !au.OK() || au.Expected == 0 {
		t.Fatalf("stream audit: %v", au)
	}
	if sa.Duplicates+sb.Duplicates == 0 {
		t.Fatal("the relays never published the same update: not hot-hot")
	}
}

// TestJetStreamBackpressure takes the stream's quorum away under traffic:
// the pending window fills, the source is held (one log line, a metric,
// not ready), status still answers, and when the quorum is back every
// update is stored, once, in order.
func TestJetStreamBackpressure(t *testing.T) {
	cl := startJSCluster(t)
	src := simsource.NewShared("bp").Synchronous()
	var logs testutil.SyncBuffer
	cfg := jetstreamsink.Config{Stream: "BACKPRESSURE", MaxPending: 16, AckTimeout: 300 * time.Millisecond,
		HealthInterval: 200 * time.Millisecond}
	r := startRelay(t, cl, src, cfg, jsTags(10), zerolog.New(&logs))
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return src.Sim().Subscribed() == 10 })
	src.Sim().Run(5 * time.Millisecond)
	testutil.WaitFor(t, "traffic", 10*time.Second, func() bool { return r.acked() > 200 })

	a, _ := r.conn.ActiveServer()
	var killed []*natstest.Node
	for _, n := range cl.Nodes() {
		if n.ServerID() != a.ID {
			n.Kill()
			killed = append(killed, n)
		}
	}
	testutil.WaitFor(t, "the window full", 10*time.Second, func() bool { return r.sink.Stats().WindowFull })
	testutil.WaitFor(t, "not ready", 10*time.Second, func() bool { ready, _ := r.sink.Ready(); return !ready })
	// Acks for what reached the quorum before the kills can still free a
	// few slots just after the window first fills; once the source is
	// blocked in Publish it stays held. It produced 10 updates every 5 ms
	// before (the "traffic" wait above), so a source that was not held
	// would produce hundreds in this observation window.
	testutil.WaitFor(t, "the source blocked", 10*time.Second, func() bool {
		st := r.sink.Stats()
		return st.WindowFull && st.Blocked > 0
	})
	produced := src.Produced()
	<-time.After(500 * time.Millisecond) // observing that nothing happens
	if p := src.Produced(); p != produced {
		t.Fatalf("the source went on producing: %d after %d", p, produced)
	}
	st := r.b.Status() // answers while a source is blocked
	js, ok := st.Sink.(jetstreamsink.Status)
	if !ok || !js.Stats.WindowFull || js.Stats.Blocked == 0 || js.Ready {
		t.Fatalf("status while blocked: %+v", st.Sink)
	}
	_, why := r.sink.Ready()
	t.Logf("not ready: %v", why)
	if n := logs.Count("pending window full"); n != 1 {
		t.Fatalf("%d log lines about the full window, want 1", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := killed[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	before := r.acked()
	testutil.WaitFor(t, "traffic after the quorum is back", 20*time.Second, func() bool { return r.acked() > before+500 })
	src.Close()
	au := r.flushAudit(t, cl, src, "BACKPRESSURE")
	t.Logf("audit %v; sink %+v", au, r.sink.Stats())
	if !au.OK() || au.Expected == 0 {
		t.Fatalf("stream audit: %v", au)
	}
	if logs.Count("backpressure released") != 1 {
		t.Fatalf("log:\n%s", logs.String())
	}
}

// TestJetStreamSourceFailoverDeduplicated replays every tag's last update
// unchanged (a source failover whose new server carries the same source
// timestamps) and refreshes with new timestamps: the stream keeps the
// replayed updates once and the refreshed ones as new updates.
func TestJetStreamSourceFailoverDeduplicated(t *testing.T) {
	cl := startJSCluster(t, natstest.WithNodes(1))
	src := simsource.NewShared("sf").Synchronous()
	r := startRelay(t, cl, src, jetstreamsink.Config{Stream: "SOURCEFAILOVER", Replicas: 1}, jsTags(5), zerolog.Nop())
	testutil.WaitFor(t, "tags subscribed", 5*time.Second, func() bool { return src.Sim().Subscribed() == 5 })
	for range 3 {
		src.Sim().EmitAll()
	}
	src.ReplayLast("failover")
	src.Sim().Refresh("failover")
	src.Sim().EmitAll()
	testutil.WaitFor(t, "all published", 5*time.Second, func() bool { return r.sink.Stats().Published == 30 })
	au := r.flushAudit(t, cl, src, "SOURCEFAILOVER")
	if !au.OK() || au.Expected != 25 || au.Stored != 25 {
		t.Fatalf("stream audit: %v", au)
	}
	if st := r.sink.Stats(); st.Duplicates != 5 || st.Acked != 30 {
		t.Fatalf("the replay was not dropped as 5 duplicates: %+v", st)
	}
}

// TestJetStreamIncompatibleStreamRefused creates streams that differ from
// the configuration in one setting each: the sink refuses each, naming
// the setting, and leaves the stream as it was.
func TestJetStreamIncompatibleStreamRefused(t *testing.T) {
	cl := startJSCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(cl.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	mgr, err := jsm.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := apconn.Connect(ctx, cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	base := func(i int) jetstreamsink.Config {
		return jetstreamsink.Config{Stream: fmt.Sprintf("INC%d", i), Subjects: []string{fmt.Sprintf("inc%d.>", i)}, Replicas: 1}
	}
	cases := []struct {
		setting string // "" for a compatible stream
		stream  []jsm.StreamOption
		cfg     func(*jetstreamsink.Config)
	}{
		{"", []jsm.StreamOption{jsm.DuplicateWindow(5 * time.Minute)}, nil}, // a longer window is fine
		{"subjects", nil, nil},
		{"replicas", nil, func(c *jetstreamsink.Config) { c.Replicas = 3 }},
		{"storage", []jsm.StreamOption{jsm.MemoryStorage()}, nil},
		{"retention", []jsm.StreamOption{jsm.InterestRetention()}, nil},
		{"discard", []jsm.StreamOption{jsm.DiscardNew(), jsm.MaxMessages(1000)}, func(c *jetstreamsink.Config) { c.MaxMsgs = 1000 }},
		{"duplicateWindow", []jsm.StreamOption{jsm.DuplicateWindow(30 * time.Second)}, nil},
		{"maxAge", []jsm.StreamOption{jsm.MaxAge(time.Hour)}, nil},
		{"maxBytes", []jsm.StreamOption{jsm.MaxBytes(1 << 20)}, nil},
		{"maxMsgs", []jsm.StreamOption{jsm.MaxMessages(10)}, nil},
		{"maxMsgsPerSubject", []jsm.StreamOption{jsm.MaxMessagesPerSubject(1)}, nil},
		{"maxMsgSize", []jsm.StreamOption{jsm.MaxMessageSize(512)}, nil},
		{"no_ack", []jsm.StreamOption{jsm.NoAck()}, nil},
	}
	for i, c := range cases {
		cfg := base(i)
		subjects := []string{cfg.Subjects[0]}
		if c.setting == "subjects" {
			subjects = []string{fmt.Sprintf("inc%d.a.>", i)}
		}
		opts := append([]jsm.StreamOption{jsm.Subjects(subjects...), jsm.FileStorage(), jsm.Replicas(1),
			jsm.DuplicateWindow(2 * time.Minute), jsm.MaxAge(0)}, c.stream...)
		st, err := mgr.NewStream(cfg.Stream, opts...)
		if err != nil {
			t.Fatalf("%s: create: %v", c.setting, err)
		}
		if c.setting != "no_ack" {
			if _, err := nc.Request(subjects[0][:len(subjects[0])-1]+"x", []byte("kept"), 2*time.Second); err != nil {
				t.Fatalf("%s: store a message: %v", c.setting, err)
			}
		}
		before := st.Configuration()
		msgsBefore, err := st.State()
		if err != nil {
			t.Fatal(err)
		}
		if c.cfg != nil {
			c.cfg(&cfg)
		}
		sink, err := jetstreamsink.New(ctx, conn, cfg)
		if c.setting == "" {
			if err != nil {
				t.Fatalf("compatible stream refused: %v", err)
			}
			sink.Close()
			continue
		}
		var mm *jetstreamsink.StreamMismatchError
		if !errors.As(err, &mm) || len(mm.Settings) != 1 || mm.Settings[0] != c.setting || !strings.Contains(err.Error(), c.setting+":") {
			t.Errorf("%s: got %v, want a mismatch naming %s", c.setting, err, c.setting)
			if sink != nil {
				sink.Close()
			}
			continue
		}
		after, err := mgr.LoadStream(cfg.Stream)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(after.Configuration(), before) {
			t.Errorf("%s: the stream was changed: %+v", c.setting, after.Configuration())
		}
		if state, _ := after.State(); state.Msgs != msgsBefore.Msgs {
			t.Errorf("%s: the stream holds %d messages, want the %d it had", c.setting, state.Msgs, msgsBefore.Msgs)
		}
	}
}

// TestJetStreamSubjectChecks refuses a stream that would capture the
// bridge's own service subjects, the micro service's discovery subjects
// among them, and tags outside the stream.
func TestJetStreamSubjectChecks(t *testing.T) {
	cl := startJSCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := apconn.Connect(ctx, cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		stream   string
		subjects []string
		template string // of the tag subjects; "" for the default
		want     string
	}{
		{"ALL", []string{"apbridge.>"}, "", `service subject "apbridge.status"`},
		{"OTHER", []string{"other.>"}, "", `tag subject "apbridge.s.Line1.T00" is not captured`},
		// It captures every tag, and the ping, info and stats requests
		// of every micro service: refused with the config, as a
		// reserved subject space.
		{"SRV", []string{"srv.>", "$SRV.>"}, "srv.{source}.{tag}", `jetstream.subjects[1]: "$SRV.>" captures subjects in the reserved subject space "$SRV.>"`},
	} {
		sink, err := jetstreamsink.New(ctx, conn, jetstreamsink.Config{Stream: c.stream, Subjects: c.subjects, Replicas: 1})
		if err != nil && !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v", c.stream, err)
		}
		if err != nil {
			continue
		}
		b, err := bridge.New(conn, bridge.Config{Subject: c.template}, bridge.WithSink(sink))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AddSource(simsource.New("s"), jsTags(1)); err != nil {
			t.Fatal(err)
		}
		err = b.Start(ctx)
		sink.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: start gave %v, want %q", c.stream, err, c.want)
		}
	}
}

func TestJetStreamConfigValidate(t *testing.T) {
	if err := jetstreamsink.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mod  func(*jetstreamsink.Config)
		want string
	}{
		{func(c *jetstreamsink.Config) { c.Stream = "a.b" }, "jetstream.stream"},
		{func(c *jetstreamsink.Config) { c.Subjects = []string{"a..b"} }, "jetstream.subjects[0]"},
		{func(c *jetstreamsink.Config) { c.Subjects = []string{"a.>.b"} }, "jetstream.subjects[0]"},
		{func(c *jetstreamsink.Config) { c.Replicas = 7 }, "jetstream.replicas: 7 is out of range (valid 1-5)"},
		{func(c *jetstreamsink.Config) { c.Storage = "disk" }, "jetstream.storage"},
		{func(c *jetstreamsink.Config) { c.Retention = "forever" }, "jetstream.retention"},
		{func(c *jetstreamsink.Config) { c.Discard = "oldest" }, "jetstream.discard"},
		{func(c *jetstreamsink.Config) { c.DuplicateWindow = time.Millisecond }, "jetstream.duplicateWindow"},
		{func(c *jetstreamsink.Config) { c.MaxAge = time.Second }, "jetstream.maxAge"},
		{func(c *jetstreamsink.Config) { c.MaxBytes = -1 }, "jetstream.maxBytes"},
		{func(c *jetstreamsink.Config) { c.MaxPending = 2000000 }, "jetstream.maxPending"},
		{func(c *jetstreamsink.Config) { c.MaxPendingBytes = 10 }, "jetstream.maxPendingBytes"},
		{func(c *jetstreamsink.Config) { c.AckTimeout = time.Millisecond }, "jetstream.ackTimeout"},
		{func(c *jetstreamsink.Config) { c.HealthInterval = time.Hour }, "jetstream.healthInterval"},
		{func(c *jetstreamsink.Config) { c.RTTWarning = 2 * time.Second }, "jetstream.rttWarning"},
		{func(c *jetstreamsink.Config) { c.ReplicaSeenCritical = time.Millisecond }, "jetstream.replicaSeenCritical"},
		{func(c *jetstreamsink.Config) { c.Stream = "PLANT\x1b[2J" }, "jetstream.stream"},
		{func(c *jetstreamsink.Config) { c.Subjects = []string{"plant.>", "$JS.API.>"} },
			`jetstream.subjects[1]: "$JS.API.>" captures subjects in the reserved subject space "$JS.API.>" (the JetStream API`},
		{func(c *jetstreamsink.Config) { c.Subjects = []string{">"} }, `jetstream.subjects[0]: ">" captures subjects in the reserved subject space "$JS.API.>"`},
		{func(c *jetstreamsink.Config) { c.Subjects = []string{"_INBOX.>"} }, `reserved subject space "_INBOX.>"`},
		{func(c *jetstreamsink.Config) { c.Subjects = []string{"$KV.fleet.>"} }, `reserved subject space "$KV.>"`},
		{func(c *jetstreamsink.Config) { c.Domain = "site.1" }, `jetstream.domain: "site.1" is not a JetStream domain`},
		{func(c *jetstreamsink.Config) { c.Domain = "site>" }, `jetstream.domain`},
		{func(c *jetstreamsink.Config) { c.Domain = strings.Repeat("s", 65) }, `jetstream.domain`},
	}
	for _, c := range cases {
		cfg := jetstreamsink.Config{}
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", cfg, err, c.want)
		}
	}
}

// TestJetStreamConfigEveryProblem: Validate reports every problem at
// once, each on its own, as the relay's validation promises.
func TestJetStreamConfigEveryProblem(t *testing.T) {
	cfg := jetstreamsink.Config{Stream: "a.b", Subjects: []string{"$SYS.>"}, Replicas: 7, Storage: "disk",
		DuplicateWindow: time.Millisecond, MaxPending: -1, AckTimeout: time.Hour}
	err := cfg.Validate()
	var n int
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		n = len(j.Unwrap())
	}
	for _, want := range []string{"jetstream.stream", "jetstream.subjects[0]", "jetstream.replicas", "jetstream.storage",
		"jetstream.duplicateWindow", "jetstream.maxPending", "jetstream.ackTimeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	if n != 7 {
		t.Errorf("%d problems reported apart, want 7: %v", n, err)
	}
}
