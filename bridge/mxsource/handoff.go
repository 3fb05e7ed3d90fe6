package mxsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/atomicfile"
	"github.com/apbridge/apbridge/mxgateway"
)

// A source with a state file (WithStateFile) keeps there what a successor
// (the same relay restarted, after a crash or not) needs to resume the
// active session's event stream instead of opening a new session and
// subscribing every tag again: the gateway's session id and what the
// gateway said at open, the item handles of the tags advised on it, and
// the last worker sequence whose events are handled and, when the bridge
// tells (bridge.StoreNotifier), whose updates the sink stored. The
// gateway contract has no acknowledgement: the gateway keeps a session
// whose stream went for its resume window and replays what it still holds
// after the sequence asked for, so the sequence recorded is the
// acknowledgement, and it moves only after the store.
//
// The file is written whole and atomically (a temporary file, fsynced,
// renamed over the old one, the directory fsynced), at most every
// stateWriteInterval while it changes, and at once when a new active
// session's first record is due (handoff.switched). Nothing in it is
// secret.

// stateWriteInterval bounds how often the state file is written while it
// changes: a successor that reads an older one gets a few events again,
// which the sink stores twice (the JetStream sink's duplicate window
// drops them).
const stateWriteInterval = 250 * time.Millisecond

// stateVersion is the version of the Handoff this source writes and
// reads.
const stateVersion = 1

// Handoff is what a successor needs to resume a source's active gateway
// session: the content of the state file, and what a HandoffStore keeps.
// A Handoff given to RecordHandoff is the store's: the source does not
// change it after.
type Handoff struct {
	// Version is the record's format (1); a source ignores a handoff of
	// another version, with a warning.
	Version int    `json:"version"`
	Source  string `json:"source"`
	// Endpoint is the gateway of the session, as configured.
	Endpoint string                  `json:"endpoint"`
	Session  mxgateway.SessionRecord `json:"session"`
	// LastStored is the worker sequence up to which every event of the
	// session is handled and its updates stored: a successor resumes
	// after it.
	LastStored uint64 `json:"lastStored"`
	// Items are the session's advised items: address -> item handle.
	Items map[string]int32 `json:"items"`
}

// HandoffStore keeps a source's handoff for its successor: a file
// (WithStateFile) for a relay that restarts, a fleet's handoff bucket for
// the relay that owns the source next.
type HandoffStore interface {
	// LoadHandoff returns the predecessor's handoff, nil when there is
	// none. Start calls it once: it must not block for long.
	LoadHandoff() (*Handoff, error)
	// RecordHandoff keeps h, the active session's latest state, in place
	// of the last one. The source calls it on a goroutine of its own, at
	// most every 250 ms while the state changes and once more at Close
	// (never after it is abandoned); an error is logged.
	RecordHandoff(h Handoff) error
}

// WithHandoffStore keeps the active session's handoff in st and starts
// from the predecessor's that st holds, as WithStateFile does with a file
// (see there); the last of the two options given applies.
func WithHandoffStore(st HandoffStore) Option {
	return func(o *options) error {
		if st == nil {
			return errors.New("WithHandoffStore: nil store")
		}
		o.store = st
		return nil
	}
}

// WithStateFile keeps the active session's handoff in the file path (see
// docs/mxgateway.md): a source started with the file of a predecessor
// resumes that session's event stream when the gateway advertises
// event-resume and still holds the session, and otherwise opens a new
// session and subscribes again, counting the loss (Stats.ResumeFallbacks).
// The directory must exist. With a handoff kept (here or in a
// HandoffStore), Close leaves the active session open on the gateway, for
// the successor.
func WithStateFile(path string) Option {
	return func(o *options) error {
		if path == "" {
			return errors.New("WithStateFile: empty path")
		}
		o.store = fileStore(path)
		return nil
	}
}

// fileStore is the HandoffStore of WithStateFile: the file's path. The
// file is written whole and atomically.
type fileStore string

// LoadHandoff reads the state file; a missing one is no error.
func (f fileStore) LoadHandoff() (*Handoff, error) {
	b, err := os.ReadFile(string(f))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st Handoff
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", string(f), err)
	}
	return &st, nil
}

// RecordHandoff writes the state file.
func (f fileStore) RecordHandoff(h Handoff) error {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(string(f), b); err != nil {
		return fmt.Errorf("state file %s: %w", string(f), err)
	}
	return nil
}

// handoff tracks the active session for the handoff store.
type handoff struct {
	store HandoffStore
	wake  chan struct{}
	// now cuts the writer's pause between writes: a new active session's
	// first record is written as soon as it can be (see switched).
	now chan struct{}

	mu      sync.Mutex
	sn      bridge.StoreNotifier // nil: an event counts as stored once handed to the bridge
	m       *member
	gen     uint64
	rec     mxgateway.SessionRecord
	handed  uint64 // the last event handled on the tracked session
	stored  uint64 // the last whose updates are stored
	marking bool   // a store mark is out
	dirty   bool
	prompt  bool // the next stored mark is a new active's first: written at once
	stopped bool // abandoned: a dead process writes nothing more
}

func newHandoff(store HandoffStore) *handoff {
	return &handoff{store: store, wake: make(chan struct{}, 1), now: make(chan struct{}, 1)}
}

// switched makes m's session gen, which just became the active one (a
// promoted standby, or a new session), the one the handoff names, without
// waiting for an event of it to be handled: a relay killed between the
// switch and the first value stored from the new session would otherwise
// leave a record naming the old session, on a gateway that is gone, and
// its successor would fall back. seen is the last event received on the
// session before it became the active one. None of those events' changes
// was relayed as it came (the session was not the active), but what a
// successor resuming after seen could miss was handed to the bridge
// before this call: each item's last value of the standby (promote's
// refresh) and what the old active relayed of the standby's older changes
// (those the old active never delivered, the switch itself skips: its
// refresh carries the standby's last value). So the record names the
// session with lastStored seen once a store mark set now comes back:
// every update handed so far is stored then. It is written at once, not after the pause between
// writes. With seen 0 (no event yet) nothing is recorded before the
// session's first stored event (resuming "after 0" would be a new
// stream), and that record is written at once too. s.emitMu is held.
func (h *handoff) switched(m *member, gen uint64, sess *mxgateway.Session, seen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == m && h.gen == gen {
		return
	}
	h.m, h.gen, h.rec = m, gen, sess.Record()
	h.handed, h.stored, h.marking, h.prompt = 0, 0, false, true
	if seen == 0 {
		return
	}
	h.handed = seen
	h.markLocked(m, gen, seen)
}

// handled records that the events of m's session gen up to seq are handed
// to the bridge (or dropped as repeats); s.emitMu is held, so that every
// update of those events is with the bridge before a store mark is set.
func (h *handoff) handled(m *member, gen uint64, sess *mxgateway.Session, seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m != m || h.gen != gen {
		// The active changed: a mark of the old session still out is
		// ignored when it comes back.
		h.m, h.gen, h.rec = m, gen, sess.Record()
		h.handed, h.stored, h.marking = 0, 0, false
	}
	h.handed = seq
	if !h.marking {
		h.markLocked(m, gen, seq)
	}
}

// markLocked asks the bridge to say when what was handed up to seq is
// stored; one mark is out at a time, so a busy source costs one per round
// trip of the sink. h.mu is held.
func (h *handoff) markLocked(m *member, gen uint64, seq uint64) {
	if h.sn == nil {
		h.storedLocked(seq)
		return
	}
	h.marking = true
	h.sn.AfterStored(func() { h.storedAt(m, gen, seq) })
}

func (h *handoff) storedAt(m *member, gen uint64, seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m != m || h.gen != gen {
		return
	}
	h.marking = false
	h.storedLocked(seq)
	if h.handed > seq {
		h.markLocked(m, gen, h.handed)
	}
}

func (h *handoff) storedLocked(seq uint64) {
	if seq <= h.stored {
		return
	}
	h.stored, h.dirty = seq, true
	select {
	case h.wake <- struct{}{}:
	default:
	}
	if h.prompt {
		h.prompt = false
		select {
		case h.now <- struct{}{}:
		default:
		}
	}
}

// stop makes the handoff write nothing more: the source is abandoned.
func (h *handoff) stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
}

// writeState records the handoff whenever it changed, at most every
// stateWriteInterval, and once more when the source closes (not when it is
// abandoned).
func (s *Source) writeState() {
	defer s.wg.Done()
	h := s.ho
	for {
		select {
		case <-s.ctx.Done():
			s.flushState()
			return
		case <-h.wake:
		}
		s.flushState()
		t := time.NewTimer(stateWriteInterval)
		select {
		case <-s.ctx.Done():
			t.Stop()
			s.flushState()
			return
		case <-t.C:
		case <-h.now:
			t.Stop()
		}
	}
}

// flushState records the handoff if it changed.
func (s *Source) flushState() {
	h := s.ho
	h.mu.Lock()
	if !h.dirty || h.stopped || h.stored == 0 {
		h.mu.Unlock()
		return
	}
	st := Handoff{Version: stateVersion, Source: s.name, Endpoint: h.m.target, Session: h.rec, LastStored: h.stored}
	m, gen := h.m, h.gen
	h.dirty = false
	h.mu.Unlock()
	s.mu.Lock()
	if m.gen != gen {
		// The session ended: the file keeps naming its last state, which
		// a successor will find gone.
		s.mu.Unlock()
		return
	}
	st.Items = make(map[string]int32, len(s.items))
	for _, it := range s.items {
		if it.advised[m.idx] && it.handle[m.idx] != 0 {
			st.Items[it.tag.Address] = it.handle[m.idx]
		}
	}
	for addr, handle := range m.adopted {
		// Adopted from the predecessor and not subscribed yet here.
		st.Items[addr] = handle
	}
	s.mu.Unlock()
	if err := h.store.RecordHandoff(st); err != nil {
		s.log.Warn().Err(err).Msg("handoff not recorded: a successor will open a new gateway session and subscribe again")
	}
}

// adoptFrom returns the predecessor's session on m's gateway, its item
// handles and where to resume, or nil when it cannot be resumed (the
// reason is logged and counted: the successor subscribes again, and the
// events since the predecessor's last store are lost).
func (s *Source) adoptFrom(m *member, st *Handoff) (*mxgateway.Session, map[string]int32, uint64) {
	var why string
	sess, err := m.client.Adopt(st.Session)
	switch {
	case err != nil:
		why = err.Error()
	case !sess.Has(mxgateway.CapEventResume):
		why = "the gateway does not advertise " + mxgateway.CapEventResume
	case st.LastStored == 0:
		why = "nothing of the session was stored"
	}
	if why != "" {
		s.resumeFailed(m, st.Session.ID, errors.New(why))
		return nil, nil, 0
	}
	items := make(map[string]int32, len(st.Items))
	for a, h := range st.Items {
		items[a] = h
	}
	return sess, items, st.LastStored
}

// resumeFailed logs and counts a predecessor's session not resumed.
func (s *Source) resumeFailed(m *member, session string, why error) {
	s.mu.Lock()
	s.stats.ResumeFallbacks++
	// The new session's first values are framed as a refresh, as after
	// an outage: consumers missed what changed since the last store.
	s.fallback = "predecessor's session not resumed on " + m.target + ": " + why.Error()
	s.mu.Unlock()
	s.log.Warn().Str("endpoint", m.target).Str("session", session).Str("reason", why.Error()).
		Msg("predecessor's gateway session not resumed: opening a new one and subscribing again with a refresh; changes since its last stored event are lost")
}

// resumed logs and counts a predecessor's session resumed.
func (s *Source) resumed(m *member, session string, after uint64) {
	s.mu.Lock()
	s.stats.SuccessorResumes++
	s.mu.Unlock()
	s.log.Info().Str("endpoint", m.target).Str("session", session).Uint64("after", after).
		Msg("predecessor's gateway session resumed")
}

// adopt maps the items of todo that the predecessor's session has advised
// already (no command), relays the changes held for them in order, and
// returns the items left to subscribe. The changes of adopted items not
// in todo stay held for a later subscribe; the handoff moves on once
// every adopted item is mapped (until then eventDone records nothing: a
// successor would find held changes behind the sequence recorded), and
// no change of an item the record did not name is held either.
func (s *Source) adopt(m *member, gen uint64, todo []*item) []*item {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	s.mu.Lock()
	if m.gen != gen || m.adopted == nil {
		s.mu.Unlock()
		return todo
	}
	var rest []*item
	for _, it := range todo {
		h, ok := m.adopted[it.tag.Address]
		if !ok {
			rest = append(rest, it)
			continue
		}
		delete(m.adopted, it.tag.Address)
		it.handle[m.idx], it.advised[m.idx] = h, true
		m.byGateway[h] = it.tag.Handle
	}
	relay := s.takeHeldLocked(m)
	waiting := len(m.held)
	done := len(m.adopted) == 0
	if done {
		// The changes still held are of items the record did not name:
		// they wait for their tags' subscribe (subscribeBatch).
		m.adopted = nil
	}
	heldSeq := m.heldSeq
	sess := m.sess
	s.mu.Unlock()
	var last uint64
	for _, e := range relay {
		s.emitLocked(m, gen, e.handle, e.d)
		last = e.d.Seq
	}
	if seq := max(last, heldSeq); s.ho != nil && done && waiting == 0 && seq > 0 && sess != nil {
		s.ho.handled(m, gen, sess, seq)
	}
	return rest
}

// startHandoff loads the predecessor's handoff (Start, s.mu held) and
// starts the writer.
func (s *Source) startHandoff(h bridge.Handler) {
	if sn, ok := h.(bridge.StoreNotifier); ok {
		s.ho.sn = sn
	}
	st, err := s.ho.store.LoadHandoff()
	switch {
	case err != nil:
		s.log.Warn().Err(err).Msg("predecessor's handoff not read: opening new gateway sessions")
		st = nil
	case st != nil && st.Version != stateVersion:
		s.log.Warn().Int("version", st.Version).Int("reads", stateVersion).
			Msg("predecessor's handoff of another version ignored: opening new gateway sessions")
		st = nil
	}
	if st != nil && st.Source == s.name {
		for _, m := range s.members {
			if m.target == st.Endpoint {
				m.resume, s.first = st, m.idx
			}
		}
	}
	s.wg.Add(1)
	go s.writeState()
}
