package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
)

// soakRelay is one relay of the soak: its config, its log, and its
// process while it runs.
type soakRelay struct {
	id      string // its fleet relay ID; "" without the fleet
	config  string
	logPath string
	child   *soakChild // nil while it is killed
	// start and end are its stats at the start and the end of its current
	// process's life: a restarted relay's counts start over.
	start, end soakRelayStats
	kills      int
	restarted  bool // measure start once it is whole again
	// prior sums the lease counts and fenced drops of its processes that
	// were killed, as last reported: they die with the process.
	prior soakFleetCounts
}

// soakFleetCounts are a relay's lease counts and fenced drops, its own
// and its JetStream sink's.
type soakFleetCounts struct {
	won, lost, handovers, renewFailures, fenced, streamFenced uint64
}

// add adds what st reports.
func (c *soakFleetCounts) add(st soakRelayStats) {
	if st.Fleet != nil {
		c.won += st.Fleet.Gained
		c.lost += st.Fleet.Lost
		c.handovers += st.Fleet.Handovers
		c.renewFailures += st.Fleet.RenewFailures
	}
	c.fenced += st.Fenced
	c.streamFenced += st.StreamFenced
}

// soakChild is the relay process and its stats line protocol.
type soakChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	log *os.File // its log, closed once it has ended
	mu  sync.Mutex
}

// startSoakChild starts the relay process on config. Its log (info level)
// goes to logPath, and with verbose to stderr too. It returns once the
// relay is up, or with an error once the process has ended.
func startSoakChild(ctx context.Context, config, logPath string, verbose bool) (*soakChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// Appended to: a relay started again after a kill keeps one log.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "soak-relay", "--config", config, "-v")
	cmd.Stderr = logFile
	if verbose {
		cmd.Stderr = io.MultiWriter(logFile, os.Stderr)
	}
	in, out, err := startLabChild(cmd, 0)
	if err != nil {
		logFile.Close()
		return nil, err
	}
	c := &soakChild{cmd: cmd, in: in, out: out, log: logFile}
	c.out.Buffer(make([]byte, 1<<20), 1<<24)
	ready := make(chan bool, 1)
	go func() { ready <- c.out.Scan() && c.out.Text() == "ready" }()
	select {
	case ok := <-ready:
		if !ok {
			c.stop()
			return nil, errors.New("the relay process did not start (its log is above)")
		}
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	}
	return c, nil
}

// ask sends one command and reads its JSON answer.
func (c *soakChild) ask(cmd string) (soakRelayStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var st soakRelayStats
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		return st, fmt.Errorf("relay process: %w", err)
	}
	if !c.out.Scan() {
		return st, fmt.Errorf("relay process ended: %v", c.out.Err())
	}
	return st, json.Unmarshal(c.out.Bytes(), &st)
}

func (c *soakChild) state() (soakRelayStats, error) { return c.ask("state") }
func (c *soakChild) stats() (soakRelayStats, error) { return c.ask("stats") }

// settledStats waits (at most 15 s) for the relay's goroutines to come
// back to want, as the last fault's retries and timers end, and returns
// its stats then or at the deadline.
func (c *soakChild) settledStats(ctx context.Context, want int) (soakRelayStats, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := c.stats()
		if err != nil || st.Goroutines <= want || time.Now().After(deadline) {
			return st, err
		}
		if err := ctxtime.Sleep(ctx, 500*time.Millisecond); err != nil {
			return st, err
		}
	}
}

func (c *soakChild) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.in == nil {
		return
	}
	fmt.Fprintln(c.in, "stop")
	c.in.Close()
	c.in = nil
	wait := make(chan error, 1)
	go func() { wait <- c.cmd.Wait() }()
	select {
	case <-wait:
	case <-time.After(15 * time.Second):
		c.cmd.Process.Kill()
		<-wait
	}
	c.log.Close()
}

// kill ends the process with SIGKILL, as a crash does: no handover, no
// flush.
func (c *soakChild) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.in == nil {
		return
	}
	c.cmd.Process.Kill()
	c.in.Close()
	c.in = nil
	c.cmd.Wait()
	c.log.Close()
}
