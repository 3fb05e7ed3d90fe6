package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// The relay process with some or all of its sources unreachable at start
// (both servers of a pair down, as after a maintenance night) runs: it
// relays the others, logs "relay running", serves status, snapshot and
// health, says which sources it waits for, and exits 0 on SIGTERM, in a
// fleet too. A pair that comes up later flows, browsed tags included.
func TestRelayProcessWithSourcesDown(t *testing.T) {
	bin := buildRelay(t)
	cl := testutil.StartCluster(t, natstest.WithJetStream())
	for _, c := range []struct {
		name string
		// pairs: which of the sources' pairs are up at start
		up []bool
		// browse lists the last source by a browse root, not by tags.
		browse bool
		extra  string
	}{
		{name: "first of two down", up: []bool{false, true}},
		{name: "all down", up: []bool{false, false}},
		{name: "browsed source down", up: []bool{true, false}, browse: true},
		{name: "fleet, all down", up: []bool{false, false}, extra: "fleet: {relayId: r1, bucket: startup, leaseTTL: 1s}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			prefix := strings.NewReplacer(" ", "", ",", "").Replace(c.name)
			var b strings.Builder
			fmt.Fprintf(&b, "instance: startup\nhttp: {listen: '127.0.0.1:0'}\nnats: {servers: [%s]}\n", strings.Join(cl.URLs(), ", "))
			fmt.Fprintf(&b, "subject: '%s.{source}.{tag}'\nservice: {prefix: %s.svc}\n%s", prefix, prefix, c.extra)
			b.WriteString("sources:\n")
			pairs := make([]*uaserver.Pair, len(c.up))
			for i, up := range c.up {
				p, err := uaserver.StartPair(ctx, uaserver.WithTags(2), uaserver.WithSetpoints(0))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				if !up {
					p.A().Kill()
					p.B().Kill()
				}
				pairs[i] = p
				fmt.Fprintf(&b, "  - name: src%d\n    endpoints: [%s]\n", i, strings.Join(p.Endpoints(), ", "))
				if c.browse && i == len(c.up)-1 {
					b.WriteString("    browse: [{node: 'ns=1;s=Sim', maxDepth: 3}]\n")
					continue
				}
				b.WriteString("    tags:\n")
				for _, tg := range p.Tags() {
					fmt.Fprintf(&b, "      - {name: %s, address: '%s'}\n", tg.Name, tg.NodeID())
				}
			}
			nc, err := nats.Connect(cl.Node(0).URL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			var mu sync.Mutex
			counts := map[string]int{} // updates by source
			nc.Subscribe(prefix+".*.>", func(m *nats.Msg) {
				if _, err := wire.DecodeJSON(m.Data); err != nil {
					return
				}
				mu.Lock()
				counts[strings.Split(m.Subject, ".")[1]]++
				mu.Unlock()
			})
			nc.Flush()
			updates := func(source string) int {
				mu.Lock()
				defer mu.Unlock()
				return counts[source]
			}

			p := startRelayProcess(t, bin, b.String())
			p.waitLog(t, "relay running")
			base := p.httpBase(t)
			// The sources that are up flow; the others are named by
			// /readyz with what they are up against.
			for i, up := range c.up {
				src := fmt.Sprintf("src%d", i)
				if up && c.extra == "" {
					testutil.WaitFor(t, src+"'s updates on NATS", 30*time.Second, func() bool { return updates(src) >= 4 })
				}
			}
			var rz struct {
				Ready   bool
				Reasons []string
			}
			// Each source that is down is named, with what it is up
			// against once its first attempt has failed.
			testutil.WaitFor(t, "/readyz naming every source that is down, and why", 30*time.Second, func() bool {
				if err := json.Unmarshal([]byte(getBody(base+"/readyz")), &rz); err != nil {
					return false
				}
				for i, up := range c.up {
					if !up && !containsSource(rz.Reasons, fmt.Sprintf("src%d", i)) {
						return false
					}
				}
				if c.extra == "" {
					for _, r := range rz.Reasons {
						if !strings.Contains(r, "last error") && !strings.Contains(r, "browsing") {
							return false
						}
					}
				}
				return !rz.Ready
			})
			if s := getBody(base + "/healthz"); s != "ok\n" {
				t.Errorf("healthz %q", s)
			}
			st, err := nc.Request(prefix+".svc.status", nil, 5*time.Second)
			if err != nil || !strings.Contains(string(st.Data), `"name":"src0"`) || !strings.Contains(string(st.Data), `"name":"src1"`) {
				t.Fatalf("status: %v %s", err, st.Data)
			}
			if _, err := nc.Request(prefix+".svc.snapshot", []byte(`{}`), 5*time.Second); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			if c.browse {
				// The browsed pair comes up: its tags are found and flow.
				last := len(c.up) - 1
				pairs[last].A().Restart(ctx, uaserver.LevelPrimary)
				pairs[last].B().Restart(ctx, uaserver.LevelHealthyFollower)
				src := fmt.Sprintf("src%d", last)
				testutil.WaitFor(t, "the browsed tags' updates once the pair is up", 60*time.Second, func() bool { return updates(src) >= 4 })
			}
			p.stop(t)
			if !strings.Contains(p.stderr.String(), `"message":"relay stopped"`) {
				t.Errorf("no \"relay stopped\" line:\n%s", p.stderr.String())
			}
		})
	}
}

// A SIGTERM while the relay still connects to NATS is a normal stop:
// exit 0.
func TestRelayProcessStoppedWhileStarting(t *testing.T) {
	bin := buildRelay(t)
	p := startRelayProcess(t, bin, fmt.Sprintf(`http: {listen: '127.0.0.1:0'}
nats: {servers: ['nats://%s']}
sources:
  - {name: opc1, endpoints: ['opc.tcp://127.0.0.1:4840'], tags: [{name: A, address: 'i=1'}]}
`, deadAddr(t)))
	base := p.httpBase(t)
	testutil.WaitFor(t, "/readyz naming the NATS connect as the step", 30*time.Second, func() bool {
		return strings.Contains(getBody(base+"/readyz"), "starting: connecting to NATS")
	})
	p.stop(t)
	if !strings.Contains(p.stderr.String(), `"message":"stopped while starting"`) {
		t.Errorf("no \"stopped while starting\" line:\n%s", p.stderr.String())
	}
}

// buildRelay builds the apbridge binary into the test's temporary
// directory (the build cache makes it a link).
func buildRelay(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "apbridge")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// relayProcess is `apbridge run` in a process of its own.
type relayProcess struct {
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's, once exited is closed
}

func startRelayProcess(t *testing.T, bin, config string) *relayProcess {
	t.Helper()
	path := filepath.Join(t.TempDir(), "apbridge.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &relayProcess{cmd: exec.Command(bin, "run", "--config", path, "--drain-timeout", "5s"),
		stderr: &testutil.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stderr, p.cmd.Stdout = p.stderr, io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *relayProcess) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// waitLog waits for a log line with message msg.
func (p *relayProcess) waitLog(t *testing.T, msg string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stderr.String(), `"message":"`+msg+`"`) {
		if time.Now().After(deadline) || p.hasExited() {
			t.Fatalf("no log line %q after 30 s, or the relay exited:\n%s", msg, p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // poll with a deadline
	}
}

var listenLine = regexp.MustCompile(`"listen":"([^"]+)"`)

// httpBase returns the URL of the relay's health and metrics listener.
func (p *relayProcess) httpBase(t *testing.T) string {
	t.Helper()
	var base string
	testutil.WaitFor(t, "the http listener", 30*time.Second, func() bool {
		if m := listenLine.FindStringSubmatch(p.stderr.String()); m != nil {
			base = "http://" + m[1]
		}
		return base != ""
	})
	return base
}

// stop sends SIGTERM and checks that the relay exits 0 within its drain
// timeout and a margin.
func (p *relayProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", p.err, p.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20 s after SIGTERM (drain timeout 5 s)\n%s", p.stderr.String())
	}
}

func getBody(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func containsSource(reasons []string, source string) bool {
	for _, r := range reasons {
		if strings.HasPrefix(r, "source "+source+":") {
			return true
		}
	}
	return false
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
