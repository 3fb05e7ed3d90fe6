package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
)

// TestApplyLiveMx: a gateway pair's tags change live: the added items go
// in one bulk subscribe, the removed one is unadvised and removed, and
// nothing else is sent: no new session, no refresh, no resubscribe of the
// untouched items, whose seq goes on.
func TestApplyLiveMx(t *testing.T) {
	data := mxsim.NewData()
	stop := data.RunCounters("C_", 6, 50*time.Millisecond)
	defer stop()
	gws := testutil.StartGateways(t, data, 2)
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conf := func(tags ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "nats: {servers: [%s]}\nhttp: {listen: \"\"}\nsources:\n  - name: gw\n    type: mxgateway\n    endpoints: [%s, %s]\n    tags:\n",
			cl.URLs()[0], gws[0].Addr(), gws[1].Addr())
		for _, tg := range tags {
			name, rest, _ := strings.Cut(tg, "|")
			fmt.Fprintf(&b, "      - {name: %s, address: C_%s.Value%s}\n", name, name[1:], rest)
		}
		return b.String()
	}
	r, cons := startWatched(ctx, t, cl.URLs()[0], conf("c0", "c1", "c2", "c3"))
	defer r.Close()
	testutil.WaitFor(t, "values of every tag", 30*time.Second, func() bool {
		return cons.count("c0") >= 3 && cons.count("c3") >= 3
	})
	before := []mxsim.Stats{gws[0].Stats(), gws[1].Stats()}
	refreshes := cons.eventCount("refresh-start")
	next, err := relay.Parse([]byte(conf("c1|, subject: plant.c1", "c2", "c3", "c4", "c5")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(ctx, next, relay.Origin{Via: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	removedAt := cons.count("c0")
	mark := cons.count("c2")
	testutil.WaitFor(t, "the added tags' values", 30*time.Second, func() bool {
		return cons.count("c4") >= 2 && cons.count("c5") >= 2 && cons.count("c2") >= mark+3
	})
	if n := cons.count("c0"); n != removedAt {
		t.Fatalf("the removed tag published %d updates after Apply", n-removedAt)
	}
	for _, n := range []string{"c1", "c2", "c3"} {
		contiguous(t, n, cons.seqs(n))
	}
	if cons.eventCount("refresh-start") != refreshes {
		t.Fatal("the change caused a refresh")
	}
	delta := map[string]uint64{}
	items := map[string]uint64{}
	for i, g := range gws {
		st := g.Stats()
		if st.Sessions != before[i].Sessions {
			t.Fatalf("gateway %d: sessions went from %d to %d", i, before[i].Sessions, st.Sessions)
		}
		for k, v := range st.CommandsByKind {
			delta[k] += v - before[i].CommandsByKind[k]
		}
		for k, v := range st.Items {
			items[k] += v - before[i].Items[k]
		}
	}
	// Ping is the liveness probe; the rest is the change.
	delete(delta, "Ping")
	for k, v := range delta {
		if v == 0 {
			delete(delta, k)
		}
	}
	if delta["RemoveItem"] != 2 || delta["UnAdvise"] < 1 || delta["Register"] != 0 || items["SubscribeBulk"]+items["AddItemBulk"] != 4 {
		t.Fatalf("commands for the change %v, bulk items %v: want one removal per gateway, two items added per gateway, no new session", delta, items)
	}
	t.Logf("commands for the change: %v, bulk items %v", delta, items)
}
