package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

// `apbridge fleet status` shows the owner of each source and the live
// relays; a config without a fleet section is refused.
func TestFleetStatus(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(1), natstest.WithJetStream())
	cfg := fmt.Sprintf(`
nats: {servers: [%s]}
fleet: {relayId: r1, leaseTTL: 1s, replicas: 1}
sources:
  - name: line1
    endpoints: [opc.tcp://127.0.0.1:1]
    tags: [{name: t, address: "ns=2;s=T"}]
  - name: line2
    endpoints: [opc.tcp://127.0.0.1:1]
    tags: [{name: t, address: "ns=2;s=T"}]
`, cl.URLs()[0])
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(cl.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := fleet.Join(ctx, nc, fleet.Config{RelayID: "r1", LeaseTTL: time.Second, Replicas: 1, Pairs: []string{"line1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	testutil.WaitFor(t, "line1 owned", 5*time.Second, func() bool { return len(m.Owned()) == 1 })

	var out, errOut bytes.Buffer
	if code := run([]string{"fleet", "status", "--config", path}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"1 relays live", "line1   r1", "line2   (none)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status does not show %q:\n%s", want, out.String())
		}
	}

	statusRefusedWithout(t, "fleet", cfg, "fleet: {relayId: r1, leaseTTL: 1s, replicas: 1}\n")
}

// statusRefusedWithout checks that `apbridge <sub> status` refuses cfg
// with the line of its section taken out, saying the section is missing.
func statusRefusedWithout(t *testing.T, sub, cfg, section string) {
	t.Helper()
	if !strings.Contains(cfg, section) {
		t.Fatalf("the config has no %q to take out:\n%s", section, cfg)
	}
	path := filepath.Join(t.TempDir(), "plain.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(cfg, section, "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{sub, "status", "--config", path}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "no "+sub+" section") {
		t.Errorf("config without %s: exit %d, %q", sub, code, errOut.String())
	}
}
