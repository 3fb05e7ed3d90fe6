package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/nats-io/nats.go"
)

// TestSIGHUPReloadsTheConfig: SIGHUP makes the relay process re-read its
// file and apply it live: a tag added to the file is relayed, with one
// audit line naming the way it came and the version; a file with a
// problem is logged, changes nothing, and the relay runs on (it would
// exit 129 on an uncaught SIGHUP).
func TestSIGHUPReloadsTheConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := natstest.Start(ctx, natstest.WithNodes(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pair, err := uaserver.StartPair(ctx, uaserver.WithTags(2), uaserver.WithSetpoints(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	tags := pair.Tags()
	conf := func(n int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "http: {listen: '127.0.0.1:0'}\nnats: {servers: [%s]}\nsources:\n  - name: opc1\n    endpoints: [%s]\n    tags:\n",
			cl.URLs()[0], strings.Join(pair.Endpoints(), ", "))
		for _, tg := range tags[:n] {
			fmt.Fprintf(&b, "      - {name: %s, address: '%s'}\n", tg.Name, tg.NodeID())
		}
		return b.String()
	}
	p := startRelayProcess(t, buildRelay(t), conf(1))
	p.waitLog(t, "relay running")
	nc, err := nats.Connect(cl.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	got := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe("apbridge.opc1."+tags[1].Name, got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	path := p.cmd.Args[3]

	// A file with a problem first: nothing changes, the relay runs on.
	if err := os.WriteFile(path, []byte(strings.Replace(conf(2), "address: '", "address: 'bad", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "config not applied")
	if p.hasExited() {
		t.Fatalf("the relay exited on SIGHUP:\n%s", p.stderr.String())
	}
	if strings.Contains(p.stderr.String(), `"message":"config applied"`) {
		t.Fatal("a file with a problem was applied")
	}

	if err := os.WriteFile(path, []byte(conf(2)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "config applied")
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatalf("no value of the added tag:\n%s", p.stderr.String())
	}
	var audit []string
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(l, `"message":"config applied"`) {
			audit = append(audit, l)
		}
	}
	if len(audit) != 1 || !strings.Contains(audit[0], `"via":"sighup"`) || !strings.Contains(audit[0], `"version":2`) ||
		!strings.Contains(audit[0], `"summary":"sources +0 -0 ~0, tags +1 -0 ~0"`) {
		t.Fatalf("audit lines %q", audit)
	}
	p.stop(t)
}
