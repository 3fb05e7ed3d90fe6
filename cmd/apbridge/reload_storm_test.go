package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/testcluster/natstest"
)

// TestReloadDuringSubscribeStorm: a reload runs in the main loop, which
// pings systemd's watchdog; one that removes a tag while the gateway's
// worker is wedged on a subscribe returns within its wait (the loop's
// period), where it waited for the subscribe's command timeout before,
// and the watchdog killed the relay. The change is applied; the removal
// goes on after it.
func TestReloadDuringSubscribeStorm(t *testing.T) {
	data := mxsim.NewData()
	stop := data.RunCounters("C_", 4, 50*time.Millisecond)
	defer stop()
	gw := testutil.StartGateways(t, data, 1)[0]
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conf := func(tags ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "nats: {servers: [%s]}\nhttp: {listen: \"\"}\nsources:\n  - name: gw\n    type: mxgateway\n    endpoints: [%s]\n    commandTimeout: 10s\n    tags:\n",
			cl.URLs()[0], gw.Addr())
		for _, name := range tags {
			fmt.Fprintf(&b, "      - {name: %s, address: C_%s.Value}\n", name, name[1:])
		}
		return b.String()
	}
	c, err := relay.Parse([]byte(conf("c0", "c1")))
	if err != nil {
		t.Fatal(err)
	}
	rl, err := relay.Start(ctx, c, relay.WithLogger(testutil.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	testutil.WaitFor(t, "both tags subscribed", 20*time.Second, func() bool { return rl.Bridge().Stats()[0].Good == 2 })
	r := &running{}
	r.relay.Store(rl)
	path := filepath.Join(t.TempDir(), "apbridge.yaml")
	const wait = 500 * time.Millisecond
	hook := reloadHook(path, r, testutil.Logger(t), wait)

	// A tag added: its subscribe wedges the gateway's worker.
	var once sync.Once
	wedged := make(chan struct{})
	gw.OnCommand(func(_, kind string) {
		if kind == "SubscribeBulk" || kind == "AddItemBulk" {
			once.Do(func() {
				gw.SetCommandLatency(time.Hour)
				close(wedged)
			})
		}
	})
	if err := os.WriteFile(path, []byte(conf("c0", "c1", "c2")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := hook(ctx, "SIGHUP"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wedged:
	case <-ctx.Done():
		t.Fatal("no subscribe reached the gateway")
	}
	testutil.WaitFor(t, "the wedged subscribe out", 10*time.Second, func() bool { return rl.Bridge().Stats()[0].SubscribeInFlight })

	// The reload that removes c0 while the subscribe is out.
	if err := os.WriteFile(path, []byte(conf("c1", "c2", "c3")), 0o600); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := hook(ctx, "SIGHUP"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if _, v := rl.Config(); v != 3 {
		t.Fatalf("the reload during the storm was not applied: version %d", v)
	}
	// The subscribe out holds the removal for up to the command timeout
	// (10 s).
	if took > wait+3*time.Second {
		t.Fatalf("the reload took %v: it waited for the wedged gateway, and the watchdog's pings with it", took)
	}
	gw.SetCommandLatency(0)
	testutil.WaitFor(t, "c0 unadvised and c1-c3 subscribed after the recovery", 30*time.Second, func() bool {
		return gw.Stats().Advised == 3 && rl.Bridge().Stats()[0].Good == 3
	})
	t.Logf("reload during the storm returned in %v", took)
}
