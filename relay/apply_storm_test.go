package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/rs/zerolog"
)

// TestApplyDuringSubscribeStormMx: a change applied while a gateway's
// worker is wedged on a subscribe (the subscribe-storm incident) goes
// through the guard like every subscribe: while the guard's request is
// out it sends none of its own, so every subscribe the gateway starts is
// one of the guard's. Apply returns when its ctx ends, without waiting
// for the subscribe out (up to the command timeout) to let the removal
// go; the removal goes on, and once the gateway recovers the added tags
// flow, the removed one publishes nothing and is unadvised.
func TestApplyDuringSubscribeStormMx(t *testing.T) {
	data := mxsim.NewData()
	stop := data.RunCounters("C_", 6, 50*time.Millisecond)
	defer stop()
	gw := testutil.StartGateways(t, data, 1)[0]
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conf := func(tags ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "nats: {servers: [%s]}\nhttp: {listen: \"\"}\n", cl.URLs()[0])
		b.WriteString("subscribe: {retryFloor: 100ms, retryCeiling: 400ms, inFlightCeiling: 800ms}\n")
		fmt.Fprintf(&b, "sources:\n  - name: gw\n    type: mxgateway\n    endpoints: [%s]\n    commandTimeout: 5s\n    tags:\n", gw.Addr())
		for _, name := range tags {
			fmt.Fprintf(&b, "      - {name: %s, address: C_%s.Value}\n", name, name[1:])
		}
		return b.String()
	}
	var logged testutil.SyncBuffer
	r, cons := startWatched(ctx, t, cl.URLs()[0], conf("c0", "c1", "c2"), relay.WithLogger(zerolog.New(&logged)))
	defer r.Close()
	testutil.WaitFor(t, "values of every tag", 30*time.Second, func() bool {
		return cons.count("c0") >= 3 && cons.count("c2") >= 3
	})

	// The gateway's subscribes from now on are watched as its worker
	// starts them; the first one wedges it.
	var (
		mu       sync.Mutex
		started  int
		wedgedAt = make(chan struct{})
		once     sync.Once
	)
	gw.OnCommand(func(_, kind string) {
		if kind != "SubscribeBulk" && kind != "AddItemBulk" {
			return
		}
		mu.Lock()
		started++
		mu.Unlock()
		once.Do(func() {
			gw.SetCommandLatency(time.Hour)
			close(wedgedAt)
		})
	})
	base := r.Bridge().Stats()[0]
	first, err := relay.Parse([]byte(conf("c0", "c1", "c2", "c3")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(ctx, first, relay.Origin{Via: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wedgedAt:
	case <-ctx.Done():
		t.Fatal("no subscribe reached the gateway")
	}
	// The storm: each subscribe times out at the gateway's command
	// deadline, and the guard asks again after its delay, one request at
	// a time.
	testutil.WaitFor(t, "a subscribe failing at the wedged gateway", 20*time.Second, func() bool {
		return r.Bridge().Stats()[0].SubscribeFailures > base.SubscribeFailures
	})
	if cons.count("c3") != 0 {
		t.Fatal("the wedged gateway subscribed c3: no storm to test")
	}

	// The change during the storm: c0 goes, c4 and c5 come.
	next, err := relay.Parse([]byte(conf("c1", "c2", "c3", "c4", "c5")))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the guard's next subscribe out at the wedged gateway", 20*time.Second, func() bool {
		st := r.Bridge().Stats()[0]
		return st.SubscribeInFlight && st.SubscribeRequests >= base.SubscribeRequests+2
	})
	applyCtx, applyCancel := context.WithTimeout(ctx, time.Second)
	defer applyCancel()
	began := time.Now()
	applied, err := r.Apply(applyCtx, next, relay.Origin{Via: "test"}, 0)
	took := time.Since(began)
	if err != nil {
		t.Fatalf("the change during the storm: %v (after %v)", err, took)
	}
	t.Logf("applied during the storm in %v: %s, problems %v", took, applied.Plan.Summary(), applied.Problems)
	// The subscribe out holds the removal for up to the command timeout
	// (5 s); Apply gives up waiting for it at its ctx's second.
	if took > 3*time.Second {
		t.Fatalf("Apply took %v: it waited for the subscribe out at the wedged gateway", took)
	}
	if len(applied.Problems) != 1 || !strings.Contains(applied.Problems[0], "have not removed their tags yet") {
		t.Fatalf("problems %q: want the removal still going on", applied.Problems)
	}
	// The log alone tells the operator that the removal goes on.
	if logged.Count(`"pending":["1 of the sources have not removed their tags yet`) != 1 {
		t.Fatalf("the log does not say the removal goes on:\n%s", logged.String())
	}
	removedAt := cons.count("c0")

	gw.SetCommandLatency(0) // the gateway recovers
	testutil.WaitFor(t, "the added tags' values after the recovery", 40*time.Second, func() bool {
		return cons.count("c3") >= 2 && cons.count("c4") >= 2 && cons.count("c5") >= 2
	})
	if n := cons.count("c0"); n != removedAt {
		t.Fatalf("the removed tag published %d updates after Apply returned", n-removedAt)
	}
	testutil.WaitFor(t, "c0 unadvised at the gateway", 20*time.Second, func() bool { return gw.Stats().Advised == 5 })
	st := gw.Stats()
	if st.MaxConcurrent > 1 {
		t.Fatalf("the gateway ran %d commands at once", st.MaxConcurrent)
	}
	bs := r.Bridge().Stats()[0]
	mu.Lock()
	n := started
	mu.Unlock()
	// Every subscribe the worker started came from the guard: one per
	// request at most (a superseded one the gateway still started counts
	// once too), never one of the change's own.
	if uint64(n) > bs.SubscribeRequests {
		t.Fatalf("the gateway started %d subscribes, the guard sent %d requests", n, bs.SubscribeRequests)
	}
	t.Logf("storm: %d subscribe requests, %d failed, %d started at the gateway, gateway max pending %d, dropped %d",
		bs.SubscribeRequests, bs.SubscribeFailures, n, st.MaxPending, st.Dropped)
}
