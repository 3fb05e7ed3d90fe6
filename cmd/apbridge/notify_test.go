//go:build unix

package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
)

// notifyListener is the service manager's end of the notify protocol: a
// unixgram socket that records each message's assignments in order.
type notifyListener struct {
	path string
	conn *net.UnixConn
	wg   sync.WaitGroup

	mu   sync.Mutex
	msgs []string // "READY=1", "STATUS=...", one per assignment
}

func listenNotify(t *testing.T) *notifyListener {
	t.Helper()
	// A short path: a socket's path is at most 107 bytes.
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l := &notifyListener{path: filepath.Join(dir, "notify")}
	l.conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: l.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		buf := make([]byte, 4096)
		for {
			n, _, err := l.conn.ReadFromUnix(buf)
			if err != nil {
				return // closed
			}
			l.mu.Lock()
			l.msgs = append(l.msgs, strings.Split(strings.TrimSpace(string(buf[:n])), "\n")...)
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { l.conn.Close(); l.wg.Wait() })
	return l
}

func (l *notifyListener) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// index is the position of the first message equal to m at or after
// from, -1 if none.
func (l *notifyListener) index(m string, from int) int {
	msgs := l.all()
	for i := from; i < len(msgs); i++ {
		if msgs[i] == m {
			return i
		}
	}
	return -1
}

// TestSystemdNotify runs `apbridge run` as its own process under a fake
// service manager (NOTIFY_SOCKET, WATCHDOG_USEC) and checks the protocol:
// STATUS= during the start, READY=1 once it relays, WATCHDOG=1 from the
// main loop, a SIGHUP logged and survived (the watchdog pings on after
// it), then SIGTERM: STOPPING=1, the drain, exit status 0, and no ping
// after STOPPING=1.
func TestSystemdNotify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, pair := startServers(t, ctx, 2, natstest.WithNodes(2))
	path := writeRelayConfig(t, cl, pair, "")
	sd := listenNotify(t)
	var stderr testutil.SyncBuffer
	cmd := exec.CommandContext(ctx, os.Args[0], "run", "--config", path)
	cmd.Env = append(os.Environ(), asBinary+"=1", "NOTIFY_SOCKET="+sd.path, "WATCHDOG_USEC=400000")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("notify messages: %q\nrelay log:\n%s", sd.all(), stderr.String())
		}
	}()

	testutil.WaitFor(t, "READY=1", 30*time.Second, func() bool { return sd.index("READY=1", 0) >= 0 })
	ready := sd.index("READY=1", 0)
	msgs := sd.all()
	if !slices.Contains(msgs[:ready], "STATUS=starting: connecting to NATS") {
		t.Errorf("no start step in STATUS= before READY=1: %q", msgs[:ready])
	}
	if w := sd.index("WATCHDOG=1", 0); w >= 0 && w < ready {
		t.Errorf("WATCHDOG=1 at %d before READY=1 at %d", w, ready)
	}
	if ready+1 >= len(msgs) || !strings.HasPrefix(msgs[ready+1], "STATUS=") {
		t.Errorf("READY=1 without its status: %q", msgs[ready:])
	}
	testutil.WaitFor(t, "WATCHDOG=1 after READY=1", 10*time.Second, func() bool { return sd.index("WATCHDOG=1", ready) >= 0 })
	testutil.WaitFor(t, "STATUS=ready", 30*time.Second, func() bool {
		return slices.ContainsFunc(sd.all(), func(m string) bool { return strings.HasPrefix(m, "STATUS=ready: NATS ") })
	})

	// SIGHUP: logged, routed to the reload hook, survived.
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the SIGHUP logged", 10*time.Second, func() bool {
		return strings.Contains(stderr.String(), `"message":"SIGHUP received: reload requested"`) &&
			strings.Contains(stderr.String(), `"message":"config unchanged"`)
	})
	afterHUP := len(sd.all())
	testutil.WaitFor(t, "WATCHDOG=1 after the SIGHUP", 10*time.Second, func() bool { return sd.index("WATCHDOG=1", afterHUP) >= 0 })
	select {
	case err := <-exited:
		t.Fatalf("the relay exited after SIGHUP: %v", err)
	default:
	}

	// SIGTERM: STOPPING=1, then a clean exit after the drain.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v (want status 0)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not exit after SIGTERM")
	}
	stopping := sd.index("STOPPING=1", ready)
	if stopping < 0 {
		t.Fatalf("no STOPPING=1: %q", sd.all())
	}
	if w := sd.index("WATCHDOG=1", stopping); w >= 0 {
		t.Errorf("WATCHDOG=1 at %d after STOPPING=1 at %d", w, stopping)
	}
	if !strings.Contains(stderr.String(), "relay stopped") {
		t.Error("no drain logged")
	}
}
