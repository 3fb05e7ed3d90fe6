package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/apbridge/apbridge/internal/atomicfile"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/rs/zerolog"
)

// The relay's state directory (stateDir) keeps, per OPC UA source, what a
// successor of the relay (the same relay restarted) needs to take the
// source's subscriptions over rather than create new ones: per endpoint,
// the server's subscription IDs, the first data message not acknowledged
// (with acknowledge after store, every one before it is stored) and the
// monitored items. Nothing in it is secret. One file per source, written
// whole and atomically (a temporary file, fsynced, renamed over the old,
// the directory fsynced), at most every stateWriteInterval while it
// changes, and at the relay's close.
//
// At start, a source whose state file is there, readable, of this
// version and of this source is given its serving endpoint's handoff
// (uaclient.WithTakeover): its first session takes the data subscription
// over. Any other file is ignored, with one warning: the source creates
// new subscriptions, with a refresh. At a graceful stop each source
// leaves its data subscription on the server for the successor
// (uaclient.WithKeepSubscriptionAtClose), and the state is written once
// every source is closed.

// stateWriteInterval bounds how often a source's state file is written
// while it changes: a successor that reads an older one asks the server
// for a few messages the relay had stored, which the stream's duplicate
// window drops.
const stateWriteInterval = 250 * time.Millisecond

// stateVersion is the version of the state file this relay writes and
// reads: 2 adds the items' settings and the data subscription's
// parameters, without which a successor would create every item again.
const stateVersion = 2

// sourceState is the content of a source's state file.
type sourceState struct {
	Version int    `json:"version"`
	Source  string `json:"source"`
	// Serving is the endpoint whose handoff was recorded last: the one
	// that served the data.
	Serving string `json:"serving"`
	// Endpoints holds the latest handoff per endpoint ("primary",
	// "backup").
	Endpoints map[string]uaclient.Handoff `json:"endpoints"`
}

// stateStore writes the sources' state files. Its recorders never block:
// they note the latest handoff and wake the writer.
type stateStore struct {
	dir string
	log zerolog.Logger
	// wmu orders the writes: a sync's and the writer's.
	wmu sync.Mutex

	mu    sync.Mutex
	state map[string]*sourceState
	dirty map[string]bool
	read  map[string]bool // sources whose file was read for a takeover

	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	started bool // the writer runs: from the first record on
	closed  bool
}

// newStateStore returns the store of dir; its writer starts with the
// first record, so that a relay that fails to start leaves nothing
// running.
func newStateStore(dir string, log zerolog.Logger) *stateStore {
	return &stateStore{dir: dir, log: log, state: map[string]*sourceState{}, dirty: map[string]bool{}, read: map[string]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// recorder returns the handoff recorder of source.
func (st *stateStore) recorder(source string) func(uaclient.Handoff) {
	return func(h uaclient.Handoff) {
		st.mu.Lock()
		s := st.state[source]
		if s == nil {
			s = &sourceState{Version: stateVersion, Source: source, Endpoints: map[string]uaclient.Handoff{}}
			st.state[source] = s
		}
		s.Endpoints[h.Endpoint] = h
		s.Serving = h.Endpoint
		st.dirty[source] = true
		if !st.started && !st.closed {
			st.started = true
			go st.run()
		}
		st.mu.Unlock()
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
}

func (st *stateStore) run() {
	defer close(st.done)
	for {
		select {
		case <-st.stop:
			st.flush()
			return
		case <-st.wake:
		}
		st.flush()
		t := time.NewTimer(stateWriteInterval)
		select {
		case <-st.stop:
			t.Stop()
			st.flush()
			return
		case <-t.C:
		}
	}
}

// flush writes every source whose state changed since its last write.
func (st *stateStore) flush() { st.write("") }

// syncer returns the handoff sync (uaclient.WithHandoffSync) of source:
// it writes the source's state now, not at the next write interval, and
// returns once it is on disk. A switch of the source's serving session
// waits for it, so that no successor takes the subscription it switched
// from over once anything of the new one is stored.
func (st *stateStore) syncer(source string) func(context.Context) error {
	return func(context.Context) error { return st.write(source) }
}

// write writes the state of only (of every source when empty) if it
// changed since its last write, and returns the first error.
func (st *stateStore) write(only string) error {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	st.mu.Lock()
	var names []string
	var data [][]byte
	for name := range st.dirty {
		if only != "" && name != only {
			continue
		}
		b, err := json.MarshalIndent(st.state[name], "", "  ")
		if err != nil {
			continue
		}
		names, data = append(names, name), append(data, b)
		delete(st.dirty, name)
	}
	st.mu.Unlock()
	var first error
	for i, name := range names {
		if err := atomicfile.Write(filepath.Join(st.dir, stateFileName(name)), data[i]); err != nil {
			st.log.Warn().Err(err).Str("source", name).Msg("state not written: a successor will create new subscriptions for this source")
			first = cmp.Or(first, err)
		}
	}
	return first
}

// close writes what changed last and stops the writer; idempotent.
func (st *stateStore) close() {
	st.mu.Lock()
	started, closed := st.started, st.closed
	st.closed = true
	st.mu.Unlock()
	if closed || !started {
		return
	}
	close(st.stop)
	<-st.done
}

// takeover returns the handoff the relay's predecessor recorded for
// source, once per source (a source built again by a live change takes
// nothing over): ok is false when there is none to take over. A file that
// cannot be read, of another version or of another source is ignored with
// a warning.
func (st *stateStore) takeover(source string) (h uaclient.Handoff, ok bool) {
	st.mu.Lock()
	done := st.read[source]
	st.read[source] = true
	st.mu.Unlock()
	if done {
		return h, false
	}
	path := filepath.Join(st.dir, stateFileName(source))
	warn := func(why string, err error) {
		st.log.Warn().Err(err).Str("source", source).Str("file", path).
			Msg("state file ignored (" + why + "): new subscriptions and a refresh for this source")
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return h, false
	}
	if err != nil {
		warn("unreadable", err)
		return h, false
	}
	var s sourceState
	if err := json.Unmarshal(b, &s); err != nil {
		warn("not a state file", err)
		return h, false
	}
	switch {
	case s.Version != stateVersion:
		warn(fmt.Sprintf("version %d, this relay reads %d", s.Version, stateVersion), nil)
		return h, false
	case s.Source != source:
		warn(fmt.Sprintf("written for source %q", s.Source), nil)
		return h, false
	}
	if h, ok = s.Endpoints[s.Serving]; !ok {
		warn(fmt.Sprintf("no handoff for its serving endpoint %q", s.Serving), nil)
	}
	return h, ok
}

// stateFileName is a source's state file: its name, which the config
// limits to characters a subject token takes.
func stateFileName(source string) string { return source + ".state.json" }

// checkStateDir checks that the relay can keep its state in dir: it
// creates the directory if need be and a file in it.
func checkStateDir(dir string, add func(string, ...any)) {
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		add("stateDir: %q cannot be created: %v (want a directory the relay can create and write)", dir, err)
		return
	}
	f, err := os.CreateTemp(dir, ".probe.*")
	if err != nil {
		add("stateDir: %q is not writable: %v (want a directory the relay can create and write)", dir, err)
		return
	}
	f.Close()
	_ = os.Remove(f.Name())
}
