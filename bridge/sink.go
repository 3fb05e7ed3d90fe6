package bridge

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/nats-io/nats.go"
)

// Sink is where the bridge puts encoded updates. The default publishes on
// the ApConnection (core NATS); package jetstreamsink stores them in a
// stream instead, and a user can write a sink of their own.
//
// Publish is called from one goroutine per source, in the order of that
// source's updates; it may block to apply backpressure toward the source.
// The message is the sink's from then on: the bridge does not touch it
// again. u is the update the message carries, for sinks that need its
// identity (MessageID) or fields; it must not be kept after Publish returns.
//
// A sink may also implement Binder, Aborter and StatusReporter.
type Sink interface {
	Publish(source string, m *nats.Msg, u *Update) error
	// Flush waits until everything published so far is stored or
	// confirmed by the broker.
	Flush(ctx context.Context) error
}

// Binder is a Sink that needs the bridge's subjects before it takes
// updates: Bridge.Start calls Bind before it starts any source, and fails
// when Bind does. The JetStream sink sets its stream up here and checks
// that the stream captures every tag subject and none of the service
// subjects.
type Binder interface {
	Bind(ctx context.Context, s Subjects) error
}

// Subjects are the subjects of a started bridge, as a Binder sees them.
type Subjects struct {
	// Prefix starts the bridge's service subjects.
	Prefix string
	// Tags holds every tag subject, by source name.
	Tags map[string][]string
	// Later holds, by source name, for the sources that get tags later
	// (WithTagsLater), a pattern every subject of their later tags
	// matches (Mapper.SourcePattern): a stream whose subjects are worked
	// out from the tags must capture it too.
	Later map[string]string
}

// Service returns the subjects of the bridge's own services:
// <prefix>.status, .snapshot, .write.> and .events.>. A sink that stores
// updates must not capture them.
func (s Subjects) Service() []string {
	p := s.Prefix
	return []string{p + ".status", p + ".snapshot", p + ".write.>", p + ".events.>"}
}

// Aborter is a Sink whose Publish can block (backpressure). Shutdown calls
// Abort when its context ends, or after 10 s, so that a source blocked in a
// full sink cannot hang it: blocked and later calls return at once.
type Aborter interface {
	Abort()
}

// StatusReporter is a Sink that reports its own state in the bridge's
// status reply (the "sink" field of Status).
type StatusReporter interface {
	SinkStatus() any
}

// coreSink publishes on the ApConnection: at most once, with the
// connection's ledger carrying publishes across its switches.
type coreSink struct{ conn *apconn.Conn }

func (s coreSink) Publish(_ string, m *nats.Msg, _ *Update) error { return s.conn.PublishOwned(m) }
func (s coreSink) Flush(ctx context.Context) error                { return s.conn.Flush(ctx) }

// subjects returns the bridge's subjects for a Binder.
func (b *Bridge) subjects(sources []*runner) Subjects {
	tags := make(map[string][]string, len(sources))
	later := map[string]string{}
	for _, r := range sources {
		name := r.src.Name()
		r.mu.Lock()
		for _, ts := range r.tags {
			tags[name] = append(tags[name], ts.subject)
		}
		r.mu.Unlock()
		if r.tagsLater {
			later[name] = b.mapper.SourcePattern(name)
		}
	}
	return Subjects{Prefix: b.cfg.Prefix, Tags: tags, Later: later}
}

// ErrSinkClosed is returned by Publish and Flush of a closed sink.
var ErrSinkClosed = errors.New("bridge: sink closed")

// MessageID returns a stable identity of an update of source, used as the
// JetStream message ID (the Nats-Msg-Id header) by sinks that deduplicate:
// a hash of the source's own identity of the update, its source name, tag, timestamp (the source timestamp, or the server
// timestamp when the source gives none), status code, type and value. It
// never depends on the relay (not on Seq, not on when or where it was
// relayed), so any relay produces the same ID for the same update and the
// stream's duplicate window keeps one copy. docs/jetstream.md says when two
// different updates could share an ID.
func MessageID(source string, u *Update) string {
	var buf [256]byte
	b := append(buf[:0], "apb1"...)
	b = appendField(b, source)
	b = appendField(b, u.Tag)
	switch {
	case !u.SourceTime.IsZero():
		b = appendTime(append(b, 's'), u.SourceTime)
	case !u.ServerTime.IsZero():
		b = appendTime(append(b, 'v'), u.ServerTime)
	default:
		b = append(b, 'n')
	}
	b = binary.BigEndian.AppendUint32(b, uint32(u.Status))
	typ, _ := TypeOf(u.Value)
	b = appendField(b, string(typ))
	b = appendValue(b, u.Value)
	b = appendField(b, u.Err)
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(t.Unix()))
	return binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
}
