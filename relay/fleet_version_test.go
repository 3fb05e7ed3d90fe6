package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/nats-io/nats.go/jetstream"
)

// versionConfig is a fleet relay's config with the given tags of one
// source on a uaserver pair: one text for every relay, but for relayId.
func versionConfig(cl *natstest.Cluster, servers *uaserver.Pair, id, tags string) string {
	return fmt.Sprintf(`
nats: {servers: [%s]}
http: {listen: ""}
fleet: {relayId: %s, bucket: versions, leaseTTL: 1s, replicas: 1, dwell: 100ms, overlap: 100ms}
sources:
  - name: line1
    endpoints: [%s, %s]
    mode: warm
    tags:
%s`, cl.URLs()[0], id, servers.Endpoints()[0], servers.Endpoints()[1], tags)
}

// versionKV opens the fleet's config bucket as a plain client.
func versionKV(t *testing.T, ctx context.Context, cl *natstest.Cluster) jetstream.KeyValue {
	t.Helper()
	kv, err := testutil.JetStream(t, cl.URLs()[0]).KeyValue(ctx, fleet.ConfigBucket("versions"))
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// runs waits until every relay reports that it tried version v and
// returns their reports.
func runs(t *testing.T, v uint64, rs ...*relay.Relay) []fleet.AppliedVersion {
	t.Helper()
	out := make([]fleet.AppliedVersion, len(rs))
	testutil.WaitFor(t, fmt.Sprintf("every relay tried version %d", v), 20*time.Second, func() bool {
		for i, r := range rs {
			a, _ := r.FleetVersion()
			if a.Tried < v {
				return false
			}
			out[i] = a
		}
		return true
	})
	return out
}

func hasTag(r *relay.Relay, tag string) bool {
	_, ok := r.Bridge().Subject("line1", tag)
	return ok
}

// TestFleetVersion: `fleet apply` writes a version and both relays of a
// fleet apply it live (the owner's new tags flow, its untouched tags'
// seq goes on); fleet status shows each relay's version. A version that
// does not parse, and one with a restart-only change written past the
// check, change nothing and are reported by every relay, which keeps the
// last good one. `fleet apply` refuses a change that needs a restart and
// writes nothing. A relay that starts later runs the current version,
// not its file.
func TestFleetVersion(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(1), natstest.WithJetStream())
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	servers, err := uaserver.StartPair(ctx, uaserver.WithTags(8), uaserver.WithSetpoints(0), uaserver.WithTagInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer servers.Close()
	var names []string
	for _, tg := range servers.Tags() {
		names = append(names, tg.Name)
	}
	file := func(id string) string {
		return versionConfig(cl, servers, id, tagLines(servers, names[0], names[1], names[2]))
	}
	r1, cons := startWatched(ctx, t, cl.URLs()[0], file("r1"))
	defer r1.Close()
	r2, _ := startWatched(ctx, t, cl.URLs()[0], file("r2"))
	defer r2.Close()
	testutil.WaitFor(t, "values of the file's tags", 30*time.Second, func() bool { return cons.count(names[1]) >= 3 })
	for _, r := range []*relay.Relay{r1, r2} {
		if a, ok := r.FleetVersion(); !ok || a.Version != 0 {
			t.Fatalf("before any version: %+v, %v", a, ok)
		}
	}

	// Version 1: tags 1-4 (0 removed, 3 and 4 added). Its relayId is
	// nobody's: each relay keeps its own.
	v1text := versionConfig(cl, servers, "admin", tagLines(servers, names[1], names[2], names[3], names[4]))
	a, err := relay.FleetApply(ctx, []byte(v1text))
	if err != nil {
		t.Fatal(err)
	}
	if a.Version == 0 || a.Previous != 0 || a.Unchanged {
		t.Fatalf("first version: %+v", a)
	}
	v1 := a.Version
	for i, rep := range runs(t, v1, r1, r2) {
		if rep.Version != v1 || rep.Error != "" {
			t.Fatalf("relay %d: %+v", i+1, rep)
		}
	}
	for _, r := range []*relay.Relay{r1, r2} {
		if !hasTag(r, names[3]) || hasTag(r, names[0]) {
			t.Fatal("a relay runs other tags than version 1's")
		}
		if c, v := r.Config(); v != v1 || c.Fleet.RelayID == "admin" {
			t.Fatalf("config version %d, relayId %s", v, c.Fleet.RelayID)
		}
	}
	mark := cons.count(names[1])
	testutil.WaitFor(t, "the added tags' values", 30*time.Second, func() bool {
		return cons.count(names[3]) >= 3 && cons.count(names[4]) >= 3 && cons.count(names[1]) >= mark+3
	})
	contiguous(t, names[1], cons.seqs(names[1]))
	contiguous(t, names[2], cons.seqs(names[2]))
	st, err := relay.FleetStatus(ctx, mustParse(t, file("r1")))
	if err != nil {
		t.Fatal(err)
	}
	if st.ConfigVersion != v1 || len(st.Relays) != 2 {
		t.Fatalf("status: %+v", st)
	}
	for _, rs := range st.Relays {
		if rs.Applied == nil || rs.Applied.Version != v1 {
			t.Fatalf("status of %s: %+v", rs.ID, rs.Applied)
		}
	}
	// The same text again writes nothing.
	if a, err := relay.FleetApply(ctx, []byte(v1text)); err != nil || !a.Unchanged || a.Version != v1 {
		t.Fatalf("the same version again: %+v, %v", a, err)
	}

	// Bad versions, written past fleet apply's check: each relay reports
	// why and keeps version 1.
	kv := versionKV(t, ctx, cl)
	prev := v1
	for _, bad := range []struct{ name, text string }{
		{"does not parse", "sources: ["},
		{"nats.name", strings.Replace(v1text, "nats: {servers: [", "nats: {name: other, servers: [", 1)},
	} {
		want := bad.name
		rev, err := fleet.WriteVersion(ctx, kv, []byte(bad.text), prev)
		if err != nil {
			t.Fatal(err)
		}
		prev = rev
		for i, rep := range runs(t, rev, r1, r2) {
			if rep.Version != v1 || rep.Error == "" {
				t.Fatalf("%s: relay %d: %+v", want, i+1, rep)
			}
			if want == "nats.name" && !strings.Contains(rep.Error, "nats.name: changed") {
				t.Fatalf("%s: relay %d says %q", want, i+1, rep.Error)
			}
		}
		for _, r := range []*relay.Relay{r1, r2} {
			if _, v := r.Config(); v != v1 || !hasTag(r, names[4]) {
				t.Fatalf("%s: a bad version changed the relay (version %d)", want, v)
			}
		}
	}

	// fleet apply refuses a restart-only change (against version 1, which
	// the relays run, not the bad current one) and writes nothing.
	added := strings.Replace(v1text, "sources:\n", "sources:\n  - {name: line2, endpoints: [opc.tcp://127.0.0.1:1], tags: [{name: x, address: \"ns=2;s=X\"}]}\n", 1)
	for _, text := range []string{
		strings.Replace(v1text, "http: {listen: \"\"}", "http: {listen: \"\"}\nservice: {prefix: other}", 1),
		added,
	} {
		a, err := relay.FleetApply(ctx, []byte(text))
		if err == nil || !strings.Contains(err.Error(), "a restart") || a.Against != v1 {
			t.Fatalf("a restart-only change: %+v, %v", a, err)
		}
		if _, rev, _, _ := fleet.ReadVersion(ctx, kv); rev != prev {
			t.Fatalf("a refused version was written (%d, was %d)", rev, prev)
		}
	}
	// A config with problems lists each.
	if _, err := relay.FleetApply(ctx, []byte(strings.Replace(strings.Replace(v1text, "mode: warm", "mode: bogus", 1), "leaseTTL: 1s", "leaseTTL: 1500ms", 1))); len(relay.Errors(err)) < 2 {
		t.Fatalf("problems: %v", err)
	}

	// Version 2 fixes the fleet: tags 1, 2, 4, 5.
	a, err = relay.FleetApply(ctx, []byte(versionConfig(cl, servers, "admin", tagLines(servers, names[1], names[2], names[4], names[5]))))
	if err != nil || a.Against != v1 {
		t.Fatalf("version after the bad ones: %+v, %v", a, err)
	}
	v2 := a.Version
	runs(t, v2, r1, r2)

	// A relay started later with the old file runs version 2.
	r3, _ := startWatched(ctx, t, cl.URLs()[0], file("r3"))
	defer r3.Close()
	if a, _ := r3.FleetVersion(); a.Version != v2 || !hasTag(r3, names[5]) || hasTag(r3, names[0]) {
		t.Fatalf("a relay started later: %+v, tags %v", a, r3.Bridge().Stats()[0])
	}
	if _, v := r3.Config(); v != v2 {
		t.Fatalf("a relay started later runs version %d", v)
	}
	for _, r := range []*relay.Relay{r1, r2, r3} {
		if got := r.ConfigError(); got != "" {
			t.Fatalf("after version 2: %q", got)
		}
	}
}
