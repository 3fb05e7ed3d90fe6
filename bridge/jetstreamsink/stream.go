package jetstreamsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
)

// streamWant is the stream the configuration asks for.
type streamWant struct{ cfg api.StreamConfig }

// streamState is what the sink knows of its stream once it is ready.
type streamState struct {
	subjects []string      // the stream's subjects
	capture  wire.Patterns // the same, to check tag subjects against
	maxMsg   int           // its max message size, 0 for none
}

// StreamMismatchError is returned when the stream exists with settings that
// differ from the configuration. The bridge never changes an existing
// stream (that could change its retention or delete data): the operator
// changes the configuration or the stream.
type StreamMismatchError struct {
	// Stream is the stream's name.
	Stream string
	// Settings names each differing setting as the YAML configuration
	// spells it: subjects, replicas, storage, retention, discard,
	// duplicateWindow, maxAge, maxBytes, maxMsgs,
	// maxMsgsPerSubject, maxMsgSize, no_ack, sealed, mirror.
	Settings []string
	// Details says for each setting what the stream has and what the
	// configuration asks for.
	Details []string
}

func (e *StreamMismatchError) Error() string {
	return fmt.Sprintf("bridge: jetstream: stream %q exists with settings that differ from the configuration: %s "+
		"(the bridge never changes an existing stream: change the configuration or the stream)",
		e.Stream, strings.Join(e.Details, "; "))
}

var (
	storageNames   = map[api.StorageType]string{api.FileStorage: "file", api.MemoryStorage: "memory"}
	retentionNames = map[api.RetentionPolicy]string{api.LimitsPolicy: "limits", api.InterestPolicy: "interest", api.WorkQueuePolicy: "workqueue"}
	discardNames   = map[api.DiscardPolicy]string{api.DiscardOld: "old", api.DiscardNew: "new"}
)

// compareStream lists how an existing stream differs from the one wanted.
// Subjects must cover the wanted ones; the duplicate window must be at
// least the wanted one; every other setting must be equal.
func compareStream(have, want api.StreamConfig) *StreamMismatchError {
	e := &StreamMismatchError{Stream: want.Name}
	add := func(setting, format string, a ...any) {
		e.Settings = append(e.Settings, setting)
		e.Details = append(e.Details, setting+": "+fmt.Sprintf(format, a...))
	}
	captured := wire.NewPatterns(have.Subjects...)
	for _, w := range want.Subjects {
		if _, ok := captured.Covering(w); !ok {
			add("subjects", "the stream's %v do not capture %q", have.Subjects, w)
			break
		}
	}
	replicas := max(have.Replicas, 1)
	if replicas != want.Replicas {
		add("replicas", "stream %d, configured %d", replicas, want.Replicas)
	}
	if have.Storage != want.Storage {
		add("storage", "stream %s, configured %s", storageNames[have.Storage], storageNames[want.Storage])
	}
	if have.Retention != want.Retention {
		add("retention", "stream %s, configured %s", retentionNames[have.Retention], retentionNames[want.Retention])
	}
	if have.Discard != want.Discard {
		add("discard", "stream %s, configured %s", discardNames[have.Discard], discardNames[want.Discard])
	}
	if have.Duplicates < want.Duplicates {
		add("duplicateWindow", "stream %v, configured at least %v", have.Duplicates, want.Duplicates)
	}
	if have.MaxAge != want.MaxAge {
		add("maxAge", "stream %s, configured %s", limitDur(have.MaxAge), limitDur(want.MaxAge))
	}
	for _, l := range []struct {
		name       string
		have, want int64
	}{
		{"maxBytes", have.MaxBytes, want.MaxBytes},
		{"maxMsgs", have.MaxMsgs, want.MaxMsgs},
		{"maxMsgsPerSubject", have.MaxMsgsPer, want.MaxMsgsPer},
		{"maxMsgSize", int64(have.MaxMsgSize), int64(want.MaxMsgSize)},
	} {
		if normLimit(l.have) != normLimit(l.want) {
			add(l.name, "stream %s, configured %s", limitInt(l.have), limitInt(l.want))
		}
	}
	if have.NoAck {
		add("no_ack", "the stream does not acknowledge publishes, so nothing could be confirmed stored")
	}
	if have.Sealed {
		add("sealed", "the stream is sealed and takes no more messages")
	}
	if have.Mirror != nil {
		add("mirror", "the stream is a mirror of %q and takes no publishes", have.Mirror.Name)
	}
	if len(e.Settings) == 0 {
		return nil
	}
	return e
}

func normLimit(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

func limitInt(v int64) string {
	if v <= 0 {
		return "no limit"
	}
	return fmt.Sprint(v)
}

func limitDur(d time.Duration) string {
	if d <= 0 {
		return "no limit"
	}
	return d.String()
}

// errNoActive: the ApConnection has no active connection right now.
var errNoActive = errors.New("no active NATS connection")

// transientStreamErr reports errors worth retrying while setting the stream
// up: timeouts, no responders, and a cluster or stream not available yet.
func transientStreamErr(err error) bool {
	if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, errNoActive) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return isAPIError(err, errCodeClusterNotAvailable, errCodeStreamOffline)
}

// ensureStream makes sure the stream exists with settings compatible with
// the configuration and the given subjects: it is created if missing,
// refused with a StreamMismatchError if it differs, and never changed.
// Transient errors are retried until ctx ends.
func (s *Sink) ensureStream(ctx context.Context, subjects []string) error {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.ensured {
		return nil
	}
	want := s.want.cfg
	want.Subjects = subjects
	wait := 50 * time.Millisecond
	for {
		err := s.ensureOnce(ctx, want)
		if err == nil || !transientStreamErr(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("bridge: jetstream: stream %q not ready: %w (last error: %v)", want.Name, ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (s *Sink) ensureOnce(ctx context.Context, want api.StreamConfig) error {
	nc := s.conn.Active()
	if nc == nil {
		return errNoActive
	}
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, max(time.Until(dl), 500*time.Millisecond))
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nfo, err := streamInfo(rctx, nc, s.cfg.Domain, want.Name)
	switch {
	case err == nil:
	case isAPIError(err, errCodeStreamNotFound):
		nfo, err = createStream(rctx, nc, s.cfg.Domain, want)
		if isAPIError(err, errCodeStreamNameInUse) { // created meanwhile, by another relay
			nfo, err = streamInfo(rctx, nc, s.cfg.Domain, want.Name)
		} else if err == nil {
			s.log.Info().Strs("subjects", want.Subjects).Int("replicas", want.Replicas).
				Dur("duplicateWindow", want.Duplicates).Msg("stream created")
		}
		if err != nil {
			return fmt.Errorf("bridge: jetstream: create stream %q: %w", want.Name, err)
		}
	default:
		return fmt.Errorf("bridge: jetstream: load stream %q: %w", want.Name, err)
	}
	have := nfo.Config
	if mm := compareStream(have, want); mm != nil {
		return mm
	}
	subjects := slices.Clone(have.Subjects)
	st2 := &streamState{subjects: subjects, capture: wire.NewPatterns(subjects...)}
	if have.MaxMsgSize > 0 {
		st2.maxMsg = int(have.MaxMsgSize)
	}
	s.state.Store(st2)
	s.ensured = true
	return nil
}

// streamReady returns what the sink knows of its stream, or an error if
// the stream has not been set up yet.
func (s *Sink) streamReady() (*streamState, error) {
	st := s.state.Load()
	if st == nil {
		return nil, fmt.Errorf("bridge: jetstream: stream %q is not set up yet (set jetstream.subjects, or start the bridge)", s.cfg.Stream)
	}
	return st, nil
}

// Bind implements bridge.Binder. Bridge.Start calls it with the bridge's
// service prefix and every tag subject by source: it works out the
// stream's subjects if the configuration has none, sets the stream up, and
// checks that it captures every tag subject and none of the bridge's
// service subjects (wire.ServiceSubjects, the micro service's among them).
func (s *Sink) Bind(ctx context.Context, bs bridge.Subjects) error {
	tags := bs.Tags
	subjects := s.cfg.Subjects
	if len(subjects) == 0 {
		var err error
		if subjects, err = DeriveSubjects(tags, bs.Later); err != nil {
			return err
		}
	}
	service := wire.NewPatterns(wire.ServiceSubjects(bs.Prefix)...)
	check := func(patterns []string, whose string) error {
		for _, p := range patterns {
			if svc, ok := service.Overlapping(p); ok {
				return fmt.Errorf("bridge: jetstream: %s subject %q would also capture the bridge's service subject %q: "+
					"give the tags a subject root of their own (the subject template) or the bridge another prefix", whose, p, svc)
			}
		}
		return nil
	}
	if err := check(subjects, "stream"); err != nil {
		return err
	}
	if err := s.ensureStream(ctx, subjects); err != nil {
		return err
	}
	st, err := s.streamReady()
	if err != nil {
		return err
	}
	if err := check(st.subjects, "the existing stream's"); err != nil {
		return err
	}
	sources := make([]string, 0, len(tags))
	for src := range tags {
		sources = append(sources, src)
	}
	sort.Strings(sources)
	for _, src := range sources {
		for _, subj := range tags[src] {
			if _, ok := st.capture.Covering(subj); !ok {
				return fmt.Errorf("bridge: jetstream: source %q: tag subject %q is not captured by stream %q (subjects %v)",
					src, subj, s.cfg.Stream, st.subjects)
			}
		}
	}
	return nil
}

// DeriveSubjects works out one stream subject per source from its tag
// subjects (tags, by source): their common leading tokens (at least one,
// and fewer than the shortest subject has) followed by ">". A source that
// gets tags later (later, by source) adds the pattern its later tags fall
// under, and only its tags outside that pattern are worked out as above.
// It is what Bind does when Config.Subjects is empty; the relay's config
// validation calls it too, so that a config it accepts can start.
func DeriveSubjects(tags map[string][]string, later map[string]string) ([]string, error) {
	var out []string
	sources := make([]string, 0, len(tags)+len(later))
	for src := range tags {
		sources = append(sources, src)
	}
	for src := range later {
		if _, ok := tags[src]; !ok {
			sources = append(sources, src)
		}
	}
	sort.Strings(sources)
	for _, src := range sources {
		subjects := tags[src]
		if p, ok := later[src]; ok {
			if p == ">" {
				return nil, fmt.Errorf("jetstream.subjects: the subject template gives the later tags of source %q no leading token of their own, so no stream subject can be worked out: set jetstream.subjects", src)
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
			within := wire.NewPatterns(p)
			subjects = slices.DeleteFunc(slices.Clone(subjects), func(s string) bool {
				_, ok := within.Covering(s)
				return ok
			})
		}
		if len(subjects) == 0 {
			continue
		}
		common := strings.Split(subjects[0], ".")
		shortest := len(common)
		for _, subj := range subjects[1:] {
			toks := strings.Split(subj, ".")
			shortest = min(shortest, len(toks))
			n := 0
			for n < len(common) && n < len(toks) && common[n] == toks[n] {
				n++
			}
			common = common[:n]
		}
		if len(common) >= shortest {
			common = common[:shortest-1]
		}
		if len(common) == 0 {
			return nil, fmt.Errorf("jetstream.subjects: the tag subjects of source %q share no leading token, so no stream subject can be worked out: set jetstream.subjects", src)
		}
		p := strings.Join(common, ".") + ".>"
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("jetstream.subjects: no tags to work the stream subjects out from: set jetstream.subjects")
	}
	return out, nil
}
