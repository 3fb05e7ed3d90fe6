package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// consumer records what a plain NATS client receives from a relay.
type consumer struct {
	mu     sync.Mutex
	byTag  map[string][]wire.Update
	events []map[string]any
}

func consume(t *testing.T, url string) *consumer {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := &consumer{byTag: map[string][]wire.Update{}}
	if _, err := nc.Subscribe("apbridge.>", func(m *nats.Msg) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if strings.HasPrefix(m.Subject, "apbridge.events.") {
			var ev map[string]any
			if json.Unmarshal(m.Data, &ev) == nil {
				c.events = append(c.events, ev)
			}
			return
		}
		if u, err := wire.DecodeJSON(m.Data); err == nil {
			c.byTag[u.Tag] = append(c.byTag[u.Tag], u)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe("plant.>", func(m *nats.Msg) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if u, err := wire.DecodeJSON(m.Data); err == nil {
			c.byTag[u.Tag] = append(c.byTag[u.Tag], u)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *consumer) count(tag string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byTag[tag])
}

func (c *consumer) seqs(tag string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint64
	for _, u := range c.byTag[tag] {
		out = append(out, u.Seq)
	}
	return out
}

func (c *consumer) eventCount(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ev := range c.events {
		if ev["event"] == kind {
			n++
		}
	}
	return n
}

// contiguous fails unless seqs are 1, 2, 3, ...: no update lost or
// repeated.
func contiguous(t *testing.T, tag string, seqs []uint64) {
	t.Helper()
	for i, s := range seqs {
		if s != uint64(i)+1 {
			t.Fatalf("tag %s: seqs %v: a gap or a repeat at %d", tag, seqs, i)
		}
	}
}

// startWatched starts a relay on conf with a consumer of what it
// publishes, subscribed first so that no update is missed; the caller
// closes the relay.
func startWatched(ctx context.Context, t *testing.T, url, conf string, opts ...relay.Option) (*relay.Relay, *consumer) {
	t.Helper()
	cfg, err := relay.Parse([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	cons := consume(t, url)
	r, err := relay.Start(ctx, cfg, append([]relay.Option{relay.WithLogger(testutil.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r, cons
}

// applyConfig is a relay's config with the given tags of a uaserver pair.
func applyConfig(cl *natstest.Cluster, servers *uaserver.Pair, tags string) string {
	return fmt.Sprintf(`
nats: {servers: [%s]}
http: {listen: ""}
sources:
  - name: line1
    endpoints: [%s, %s]
    mode: warm
    tags:
%s`, cl.URLs()[0], servers.Endpoints()[0], servers.Endpoints()[1], tags)
}

func tagLines(servers *uaserver.Pair, lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		name, rest, _ := strings.Cut(l, "|")
		tg, _ := servers.Tag(name)
		fmt.Fprintf(&b, "      - {name: %s, address: %q%s}\n", name, tg.NodeID().String(), rest)
	}
	return b.String()
}

// TestApplyLive: on a Warm pair, a new config adds tags, removes one,
// changes one's monitoring and another's subject, without a new session
// or a refresh; the untouched tags' seq goes on without a gap; the removed
// tag is deleted at the server and publishes nothing more. A config with a
// restart-only change and one with a problem change nothing.
func TestApplyLive(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	servers, err := uaserver.StartPair(ctx, uaserver.WithTags(8), uaserver.WithSetpoints(0), uaserver.WithTagInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer servers.Close()
	names := make([]string, 8)
	for i, tg := range servers.Tags() {
		names[i] = tg.Name
	}
	first := applyConfig(cl, servers, tagLines(servers, names[0], names[1], names[2]+"|, samplingIntervalMilliseconds: 50", names[3], names[4]))
	r, cons := startWatched(ctx, t, cl.URLs()[0], first)
	defer r.Close()
	testutil.WaitFor(t, "every tag's values", 30*time.Second, func() bool {
		for _, n := range names[:5] {
			if cons.count(n) < 3 {
				return false
			}
		}
		return true
	})
	a := servers.A()
	before := a.Stats()
	refreshes := cons.eventCount("refresh-start")

	next, err := relay.Parse([]byte(applyConfig(cl, servers, tagLines(servers,
		names[1], names[2]+"|, samplingIntervalMilliseconds: 100", names[3]+"|, subject: plant.moved", names[4], names[5], names[6]))))
	if err != nil {
		t.Fatal(err)
	}
	applied, err := r.Apply(ctx, next, relay.Origin{Via: "test"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if applied.Version != 2 || applied.Plan.Summary() != "sources +0 -0 ~0, tags +2 -1 ~2" {
		t.Fatalf("applied %+v (%s)", applied, applied.Plan.Summary())
	}
	removedAt := cons.count(names[0])
	mark := cons.count(names[1])
	testutil.WaitFor(t, "the added tags' values and more of the others", 20*time.Second, func() bool {
		return cons.count(names[5]) >= 2 && cons.count(names[6]) >= 2 && cons.count(names[1]) >= mark+5 && cons.count(names[3]) >= mark+5
	})
	if n := cons.count(names[0]); n != removedAt {
		t.Fatalf("the removed tag published %d updates after Apply returned", n-removedAt)
	}
	for _, n := range []string{names[1], names[2], names[3], names[4]} {
		contiguous(t, n, cons.seqs(n))
	}
	if n := cons.eventCount("refresh-start"); n != refreshes {
		t.Fatal("the change caused a refresh")
	}
	after := a.Stats()
	if after.Sessions != before.Sessions {
		t.Fatalf("sessions at the active server went from %d to %d", before.Sessions, after.Sessions)
	}
	// Two added, one moved to a new item (monitoring); one removed.
	if got := after.ItemsCreated - before.ItemsCreated; got != 3 {
		t.Fatalf("%d items created at the server, want 3", got)
	}
	if got := after.MonitoredItems - before.MonitoredItems; got != 1 {
		t.Fatalf("monitored items at the server changed by %d, want +1", got)
	}
	if _, v := r.Config(); v != 2 {
		t.Fatalf("version %d", v)
	}

	// Refused: a restart-only field beside a live change.
	refused, err := relay.Parse([]byte(strings.Replace(applyConfig(cl, servers, tagLines(servers, names[1], names[7])),
		"http: {listen: \"\"}", "http: {listen: \"\"}\nservice: {prefix: other}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(ctx, refused, relay.Origin{Via: "test"}, 0); err == nil || !strings.Contains(err.Error(), "service.prefix: changed; a restart applies it") {
		t.Fatalf("a restart-only change: %v", err)
	}
	// Refused: a problem in the config.
	broken := *next
	broken.Sources = append([]relay.SourceConfig(nil), next.Sources...)
	broken.Sources[0].Tags = append(broken.Sources[0].Tags, broken.Sources[0].Tags[0])
	if _, err := r.Apply(ctx, &broken, relay.Origin{Via: "test"}, 0); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Fatalf("a config with a problem: %v", err)
	}
	if _, ok := r.Bridge().Subject("line1", names[7]); ok {
		t.Fatal("a refused config added a tag")
	}
	if _, ok := r.Bridge().Subject("line1", names[2]); !ok {
		t.Fatal("a refused config removed a tag")
	}
	if _, v := r.Config(); v != 2 || r.ConfigError() == "" {
		t.Fatalf("after refusals: version %d, error %q", v, r.ConfigError())
	}
}

// TestApplyRacingFailover: a change applied while the pair fails over
// lands on the new active server: the added tags flow from it, the removed
// one does not, and the untouched tags' seq has no gap.
func TestApplyRacingFailover(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	servers, err := uaserver.StartPair(ctx, uaserver.WithTags(6), uaserver.WithSetpoints(0), uaserver.WithTagInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer servers.Close()
	var names []string
	for _, tg := range servers.Tags() {
		names = append(names, tg.Name)
	}
	r, cons := startWatched(ctx, t, cl.URLs()[0], applyConfig(cl, servers, tagLines(servers, names[0], names[1], names[2])))
	defer r.Close()
	testutil.WaitFor(t, "values", 30*time.Second, func() bool { return cons.count(names[2]) >= 3 })
	next, err := relay.Parse([]byte(applyConfig(cl, servers, tagLines(servers, names[1], names[2], names[3], names[4]))))
	if err != nil {
		t.Fatal(err)
	}
	servers.A().SetLevel(0) // maintenance: the pair moves to B
	if _, err := r.Apply(ctx, next, relay.Origin{Via: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the failover", 30*time.Second, func() bool {
		st := r.Bridge().Stats()
		return st[0].Health.Endpoint == servers.Endpoints()[1] && st[0].Health.State.Connected()
	})
	removedAt := cons.count(names[0])
	mark := cons.count(names[3])
	testutil.WaitFor(t, "the added tags from B", 30*time.Second, func() bool {
		return cons.count(names[3]) >= mark+3 && cons.count(names[4]) >= 3
	})
	if n := cons.count(names[0]); n != removedAt {
		t.Fatalf("the removed tag published %d updates after the failover", n-removedAt)
	}
	for _, n := range names[1:3] {
		contiguous(t, n, cons.seqs(n))
	}
	if st := servers.B().Stats(); st.MonitoredItems == 0 {
		t.Fatal("no items at B")
	}
}
