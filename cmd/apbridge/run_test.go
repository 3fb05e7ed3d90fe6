package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/cli"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

func writeRelayConfig(t *testing.T, cl *natstest.Cluster, pair *uaserver.Pair, extra string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "instance: test\nhttp: {listen: '127.0.0.1:0'}\nnats:\n  servers: [%s]\n", strings.Join(cl.URLs(), ", "))
	fmt.Fprintf(&b, "sources:\n  - name: opc1\n    endpoints: [%s]\n    tags:\n", strings.Join(pair.Endpoints(), ", "))
	for _, tg := range pair.Tags() {
		fmt.Fprintf(&b, "      - {name: %s, address: '%s', writable: %v}\n", tg.Name, tg.NodeID(), tg.Writable())
	}
	b.WriteString(extra)
	path := filepath.Join(t.TempDir(), "apbridge.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startServers starts a NATS cluster and an OPC UA pair with tags tags,
// closed at the end of the test.
func startServers(t *testing.T, ctx context.Context, tags int, natsOpts ...natstest.Option) (*natstest.Cluster, *uaserver.Pair) {
	t.Helper()
	cl, err := natstest.Start(ctx, natsOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	pair, err := uaserver.StartPair(ctx, uaserver.WithTags(tags))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pair.Close)
	return cl, pair
}

func TestRelayEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, pair := startServers(t, ctx, 4)
	c, err := relay.Load(writeRelayConfig(t, cl, pair, ""))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(cl.Node(2).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var got atomic.Int64
	nc.Subscribe("apbridge.opc1.>", func(m *nats.Msg) {
		if _, err := wire.DecodeJSON(m.Data); err == nil {
			got.Add(1)
		}
	})
	nc.Flush()
	var logs testutil.SyncBuffer
	r, err := startRelay(ctx, c, cli.NewLogger(&logs, false, zerolog.DebugLevel), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer checkLogLines(t, &logs)
	base := "http://" + r.httpLn.Addr().String()
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < 20 || !ready(base) {
		if time.Now().After(deadline) {
			t.Fatalf("%d updates, ready %v", got.Load(), ready(base))
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
	body := get(t, base+"/metrics")
	for _, want := range []string{`apbridge_updates_out_total{source="opc1"}`, `apbridge_nats_status{status="connected"} 1`,
		`apbridge_source_state{source="opc1",state="connected"} 1`, `apbridge_tags{quality="good",source="opc1"}`,
		`apbridge_tags_failed{source="opc1"} 0`, `apbridge_tags_no_value{source="opc1"}`, "go_goroutines", "process_", `apbridge_build_info{build_date="`, `,goversion="go`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if s := get(t, base+"/healthz"); !strings.Contains(s, "ok") {
		t.Fatalf("healthz %q", s)
	}
	// The metrics pass the Prometheus linter (what promtool check metrics
	// runs).
	if problems, err := promtest.GatherAndLint(newRegistry(r)); err != nil || len(problems) > 0 {
		t.Errorf("metrics lint: %v %+v", err, problems)
	}
	// A NATS switch and a source failover are observed in the histograms,
	// by cause.
	if err := r.relay.Load().Conn().SwitchToPassive(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the switch in the histogram", 10*time.Second, func() bool {
		return strings.Contains(get(t, base+"/metrics"), `apbridge_nats_switch_duration_seconds_count{cause="manual"} 1`)
	})
	pair.A().Kill()
	testutil.WaitFor(t, "the failover in the histogram", 20*time.Second, func() bool {
		m := get(t, base+"/metrics")
		// A cause the failover names, not "other".
		return regexp.MustCompile(`apbridge_source_failover_duration_seconds_count\{cause="[a-z_]+",source="opc1"\} 1`).MatchString(m) &&
			!strings.Contains(m, `cause="other"`)
	})
	if problems, err := promtest.GatherAndLint(newRegistry(r)); err != nil || len(problems) > 0 {
		t.Errorf("metrics lint with histograms: %v %+v", err, problems)
	}
	// Both servers gone: not ready, and /readyz says why.
	pair.B().Kill()
	deadline = time.Now().Add(10 * time.Second)
	for ready(base) {
		if time.Now().After(deadline) {
			t.Fatal("still ready with both servers dead")
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
	if s := get(t, base+"/readyz"); !strings.Contains(s, "source opc1") {
		t.Fatalf("readyz %q", s)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := r.stop(sctx); err != nil {
		t.Fatal(err)
	}
}

func ready(base string) bool {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestRunCommandStopsOnSignal runs `apbridge run` as a user would and
// cancels it as SIGTERM does: it exits cleanly.
func TestRunCommandStopsOnSignal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, pair := startServers(t, ctx, 2, natstest.WithNodes(2))
	path := writeRelayConfig(t, cl, pair, "")
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var stderr testutil.SyncBuffer
	go func() { done <- runRun(rctx, []string{"--config", path}, io.Discard, &stderr) }()
	nc, err := nats.Connect(cl.Node(1).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m, err := nc.Request("apbridge.status", nil, 200*time.Millisecond); err == nil && strings.Contains(string(m.Data), `"state":"connected"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("relay never reported a connected source")
		}
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop")
	}
}

// TestRelayJetStreamSink runs the relay with `sink: jetstream`: the stream
// is created from the config and stores the updates, and readiness and
// metrics include it.
func TestRelayJetStreamSink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, pair := startServers(t, ctx, 4, natstest.WithJetStream())
	c, err := relay.Load(writeRelayConfig(t, cl, pair, "sink: jetstream\njetstream: {stream: PLANT, replicas: 3, duplicateWindow: 1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := startRelay(ctx, c, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + r.httpLn.Addr().String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := cl.StreamState(ctx, "PLANT")
		if err == nil && st.Msgs > 50 && ready(base) {
			if st.Replicas != 3 {
				t.Fatalf("stream replicas %d", st.Replicas)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %+v (%v), ready %v: %s", st, err, ready(base), get(t, base+"/readyz"))
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline
	}
	if body := get(t, base+"/metrics"); !strings.Contains(body, "apbridge_jetstream_ready 1") {
		t.Fatal("metrics lack apbridge_jetstream_ready 1")
	}
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := r.stop(sctx); err != nil {
		t.Fatal(err)
	}
}

// TestHealthWhileStarting: /healthz answers while the relay still waits
// for NATS, and /readyz says what it waits for.
func TestHealthWhileStarting(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := l.Addr().String() // nothing listens here once closed
	l.Close()
	path := filepath.Join(t.TempDir(), "apbridge.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`http: {listen: '127.0.0.1:0'}
nats: {servers: ['nats://%s']}
sources:
  - {name: opc1, endpoints: ['opc.tcp://127.0.0.1:4840'], tags: [{name: A, address: 'i=1'}]}
`, nowhere)), 0o600)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stderr testutil.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- runRun(ctx, []string{"--config", path}, io.Discard, &stderr) }()
	listen := regexp.MustCompile(`"listen":"([^"]+)"`)
	var base string
	testutil.WaitFor(t, "the http listener", 10*time.Second, func() bool {
		m := listen.FindStringSubmatch(stderr.String())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	})
	if s := get(t, base+"/healthz"); s != "ok\n" {
		t.Errorf("healthz while starting: %q", s)
	}
	if ready(base) {
		t.Error("ready while starting")
	}
	testutil.WaitFor(t, "/readyz naming the NATS connect as the step", 30*time.Second, func() bool {
		return strings.Contains(get(t, base+"/readyz"), "starting: connecting to NATS")
	})
	if s := get(t, base+"/metrics"); !strings.Contains(s, "go_goroutines") || !strings.Contains(s, "apbridge_build_info{") {
		t.Errorf("metrics while starting lack the Go and build collectors:\n%s", s)
	}
	stop()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop")
	}
}

// checkLogLines checks the relay's log lines: JSON objects with no key
// twice at any level, and a time in RFC 3339 with milliseconds.
func checkLogLines(t *testing.T, logs *testutil.SyncBuffer) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) < 5 {
		t.Fatalf("%d log lines", len(lines))
	}
	for _, line := range lines {
		if dup := duplicateKey(line); dup != "" {
			t.Errorf("key %q twice in %s", dup, line)
		}
		var l struct{ Time string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if _, err := time.Parse(cli.TimeFormat, l.Time); err != nil {
			t.Errorf("time %q: %v", l.Time, err)
		}
	}
}

// duplicateKey returns a key that occurs twice in one object of the JSON
// text line, or "".
func duplicateKey(line string) string {
	dec := json.NewDecoder(strings.NewReader(line))
	var stack []map[string]bool
	expectKey := []bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, map[string]bool{})
				expectKey = append(expectKey, true)
				continue
			case '[':
				stack = append(stack, nil)
				expectKey = append(expectKey, false)
				continue
			default:
				stack, expectKey = stack[:len(stack)-1], expectKey[:len(expectKey)-1]
			}
		case string:
			if n := len(stack); n > 0 && stack[n-1] != nil && expectKey[n-1] {
				if stack[n-1][v] {
					return v
				}
				stack[n-1][v] = true
				expectKey[n-1] = false
				continue
			}
		}
		// A value ended: the enclosing object expects a key next.
		if n := len(stack); n > 0 && stack[n-1] != nil {
			expectKey[n-1] = true
		}
	}
}

func TestDuplicateKey(t *testing.T) {
	for line, want := range map[string]string{
		`{"level":"info","a":{"level":1,"b":[1,{"c":2}]},"c":3}`: "",
		`{"level":"info","x":1,"level":2}`:                       "level",
		`{"a":{"b":1,"b":2}}`:                                    "b",
		`{"a":[{"b":1},{"b":2}],"d":{"e":{}},"d2":"d"}`:          "",
	} {
		if got := duplicateKey(line); got != want {
			t.Errorf("duplicateKey(%s) = %q, want %q", line, got, want)
		}
	}
}
