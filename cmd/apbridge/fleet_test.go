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
	m := joinMember(t, cl.URLs()[0], "r1", "line1")
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

// `apbridge fleet apply` writes the file as the fleet's version, says so
// once and writes nothing for the same file again; a file with problems
// is refused with each; --wait fails naming a live relay that does not
// report the version; `fleet status` shows the version.
func TestFleetApply(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(1), natstest.WithJetStream())
	cfg := fmt.Sprintf(`
nats: {servers: [%s]}
fleet: {relayId: admin, leaseTTL: 1s, replicas: 1}
sources:
  - name: line1
    endpoints: [opc.tcp://127.0.0.1:1]
    tags: [{name: t, address: "ns=2;s=T"}]
`, cl.URLs()[0])
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	path := write("fleet.yaml", cfg)
	apply := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"fleet", "apply"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := apply("--config", path, "--wait", "0"); code != 0 || !strings.Contains(out, "written (the fleet's first)") {
		t.Fatalf("first version: exit %d: %s%s", code, out, errOut)
	}
	if code, out, errOut := apply("--config", path, "--wait", "0"); code != 0 || !strings.Contains(out, "unchanged") {
		t.Fatalf("same file: exit %d: %s%s", code, out, errOut)
	}
	bad := write("bad.yaml", strings.Replace(strings.Replace(cfg, "leaseTTL: 1s", "leaseTTL: 1500ms", 1), "ns=2;s=T", "", 1))
	if code, _, errOut := apply("--config", bad); code != 1 || strings.Count(errOut, "\n") < 2 || !strings.Contains(errOut, "leaseTTL") {
		t.Fatalf("a file with problems: exit %d: %s", code, errOut)
	}

	joinMember(t, cl.URLs()[0], "mute", "line1")
	next := write("next.yaml", strings.Replace(cfg, "ns=2;s=T", "ns=2;s=U", 1))
	if code, out, errOut := apply("--config", next, "--wait", "300ms"); code != 1 || !strings.Contains(errOut, "relay mute: has not reported") || !strings.Contains(out, "tags +0 -0 ~1") {
		t.Fatalf("a relay that does not report: exit %d: %s%s", code, out, errOut)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"fleet", "status", "--config", path}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "config version ") || strings.Contains(out.String(), "config version none") {
		t.Fatalf("status: exit %d: %s%s", code, out.String(), errOut.String())
	}
}

// joinMember joins a fleet member of its own, lease TTL 1 s, to the fleet
// on url; it leaves when the test ends.
func joinMember(t *testing.T, url, id string, pairs ...string) *fleet.Member {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := fleet.Join(ctx, nc, fleet.Config{RelayID: id, LeaseTTL: time.Second, Replicas: 1, Pairs: pairs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Close(ctx)
	})
	return m
}
