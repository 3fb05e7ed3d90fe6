package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/rs/zerolog"
)

// fakeManager records what a notifier sends.
type fakeManager struct {
	mu   sync.Mutex
	msgs []string
}

func (f *fakeManager) send(state string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, strings.Split(state, "\n")...)
	return nil
}

func (f *fakeManager) count(m string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.msgs {
		if s == m {
			n++
		}
	}
	return n
}

// TestMainLoopHangStopsWatchdog: the watchdog is pinged from the main
// loop's passes, so a relay whose state cannot be read (a lock held
// forever) stops the pings and /healthz calls it stalled; once the state
// reads again, the pings resume.
func TestMainLoopHangStopsWatchdog(t *testing.T) {
	mgr := &fakeManager{}
	n := &notifier{log: zerolog.Nop(), watchdog: time.Second, send: mgr.send}
	r := &running{log: zerolog.Nop()}
	r.stale.Store(int64(time.Minute))
	entered := make(chan struct{}, 1)
	var hang sync.Mutex // held: the relay is hung
	state := func() string {
		select {
		case entered <- struct{}{}:
		default:
		}
		hang.Lock()
		defer hang.Unlock()
		return "ready: NATS connected, 1 sources"
	}
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	loop := mainLoop{log: zerolog.Nop(), notify: n, state: state, passed: r.markPass,
		reload: func(context.Context, string) error { return nil }, tick: tick}
	done := make(chan struct{})
	go func() { defer close(done); loop.run(ctx) }()
	defer func() { cancel(); <-done }()

	<-entered
	tick <- time.Now() // accepted once the first pass is done
	<-entered
	testutil.WaitFor(t, "two pings", 5*time.Second, func() bool { return mgr.count("WATCHDOG=1") == 2 })
	if got := mgr.count("STATUS=ready: NATS connected, 1 sources"); got != 1 {
		t.Errorf("STATUS= sent %d times for one unchanged line, want 1", got)
	}

	// The relay hangs: the next pass blocks in the state read.
	hang.Lock()
	hung := true
	defer func() {
		if hung {
			hang.Unlock() // a failed test still stops the loop
		}
	}()
	tick <- time.Now()
	<-entered
	if got := mgr.count("WATCHDOG=1"); got != 2 {
		t.Fatalf("%d pings while the relay is hung, want still 2", got)
	}
	// /healthz: stalled once the last pass is older than stale.
	if r.stalled() != 0 {
		t.Fatal("stalled right after a pass")
	}
	r.lastPass.Store(time.Now().Add(-2 * time.Minute).UnixNano())
	if r.stalled() < 2*time.Minute {
		t.Errorf("stalled() = %v for a pass 2 minutes ago", r.stalled())
	}
	hang.Unlock()
	hung = false
	testutil.WaitFor(t, "the ping after the hang", 5*time.Second, func() bool { return mgr.count("WATCHDOG=1") == 3 })
	if r.stalled() != 0 {
		t.Error("still stalled after a pass")
	}
}

// TestHealthzStalled: /healthz answers 503 and says for how long once the
// main loop has not passed for longer than it should, ok before the loop
// runs.
func TestHealthzStalled(t *testing.T) {
	r := &running{log: zerolog.Nop(), hist: newHistograms()}
	r.setStep("connecting to NATS")
	if err := r.serveHTTP("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer r.stopHTTP()
	base := "http://" + r.httpLn.Addr().String()
	if s := get(t, base+"/healthz"); s != "ok\n" {
		t.Fatalf("healthz before the loop: %q", s)
	}
	r.stale.Store(int64(time.Second))
	r.lastPass.Store(time.Now().Add(-time.Minute).UnixNano())
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(get(t, base+"/healthz"), "stalled: the main loop last passed 1m") {
		t.Errorf("healthz of a stalled loop: %d %q", resp.StatusCode, get(t, base+"/healthz"))
	}
	r.markPass()
	if s := get(t, base+"/healthz"); s != "ok\n" {
		t.Errorf("healthz after a pass: %q", s)
	}
}

func TestPassInterval(t *testing.T) {
	for wd, want := range map[time.Duration]time.Duration{
		0: defaultPass, 400 * time.Millisecond: 200 * time.Millisecond, 30 * time.Second: defaultPass, 6 * time.Second: 3 * time.Second,
	} {
		if got := passInterval(wd); got != want {
			t.Errorf("passInterval(%v) = %v, want %v", wd, got, want)
		}
	}
}

func TestOneLine(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	got := oneLine("not ready:\n  source a: down\t(x)  " + long)
	if strings.ContainsAny(got, "\n\t") || len(got) > maxStatus || !strings.HasPrefix(got, "not ready: source a: down (x) é") || !strings.HasSuffix(got, "é...") {
		t.Errorf("oneLine = %q (%d bytes)", got, len(got))
	}
}
