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
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/internal/tailbuf"
)

// errEndedEarly is a labProc that ended before it said where it listens.
var errEndedEarly = errors.New("ended before it was up")

// labProc is a process of the edge scenarios' world (the hub's or the
// site's servers), run from this executable: it says where it listens in
// one JSON line, then answers each command line with "ok" or "error: ...".
type labProc struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	mu   sync.Mutex // one command at a time
	once sync.Once
}

// startLabProc starts this executable with args at the given nice value
// and returns once it has said where it listens (into addr), at most 2
// minutes.
func startLabProc(ctx context.Context, name string, verbose bool, nice int, addr any, args ...string) (*labProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	errTail := tailbuf.New(4 << 10) // what it said before it ended, without -v
	cmd.Stderr = errTail
	if verbose {
		cmd.Stderr = os.Stderr
	}
	in, out, err := startLabChild(cmd, nice)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &labProc{name: name, cmd: cmd, in: in, out: out}
	first := make(chan error, 1)
	go func() {
		if !p.out.Scan() {
			first <- errEndedEarly
			return
		}
		first <- json.Unmarshal(p.out.Bytes(), addr)
	}()
	select {
	case err = <-first:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(2 * time.Minute):
		err = fmt.Errorf("%s: not up within 2 minutes", name)
	}
	if err == nil && nice != 0 {
		err = renice(cmd, nice) // its threads are all made by now
	}
	if err != nil {
		p.stop()
		if errors.Is(err, errEndedEarly) { // its stderr is all written once stop has waited
			err = fmt.Errorf("%s %w: %q", name, err, errTail.String())
		}
		return nil, err
	}
	return p, nil
}

// do sends one command and waits for its answer.
func (p *labProc) do(line string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintln(p.in, line); err != nil {
		return fmt.Errorf("%s: %s: %w", p.name, line, err)
	}
	if !p.out.Scan() {
		return fmt.Errorf("%s: %s: no answer (%v)", p.name, line, p.out.Err())
	}
	if r := p.out.Text(); r != "ok" {
		return fmt.Errorf("%s: %s: %s", p.name, line, r)
	}
	return nil
}

// stop ends the process: its stdin closed, it shuts its servers down;
// killed if it has not within 30 s. Idempotent; it waits for the process.
func (p *labProc) stop() {
	p.once.Do(func() {
		p.in.Close()
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	})
}

// serveCommands is the other end of a labProc: it writes addr as one JSON
// line, then runs each line of in ("verb arg") through do and answers it,
// until in ends.
func serveCommands(in io.Reader, out io.Writer, addr any, do func(verb, arg string) error) error {
	if err := json.NewEncoder(out).Encode(addr); err != nil {
		return err
	}
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		verb, arg, _ := strings.Cut(strings.TrimSpace(lines.Text()), " ")
		reply := "ok"
		if err := do(verb, arg); err != nil {
			reply = "error: " + err.Error()
		}
		if _, err := fmt.Fprintln(out, reply); err != nil {
			return err
		}
	}
	return lines.Err()
}
