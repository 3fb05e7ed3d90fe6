package bridge

import (
	"context"
	"errors"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// Sink is where the bridge puts encoded updates. The default publishes on
// the ApConnection (core NATS); package jetstreamsink stores them in a
// stream instead, and a user can write a sink of their own.
//
// Publish is called from one goroutine per source, in the order of that
// source's updates; it may block to apply backpressure toward the source.
// The message is the sink's from then on: the bridge does not touch it
// again. (The CoreSink alone is done with it when Publish returns, and
// the bridge fills the same message again for the next update.) u is the update the message carries, for sinks that need its
// identity (wire.MessageID) or fields; it must not be kept after Publish returns.
//
// A sink may also implement Binder, Aborter and StatusReporter.
type Sink interface {
	Publish(source string, m *nats.Msg, u *wire.Update) error
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
	// Prefix starts the bridge's service subjects (wire.ServiceSubjects),
	// which a sink that stores updates must not capture.
	Prefix string
	// Tags holds every tag subject, by source name.
	Tags map[string][]string
	// Later holds, by source name, for the sources that get tags later
	// (WithTagsLater), a pattern every subject of their later tags
	// matches (Mapper.SourcePattern): a stream whose subjects are worked
	// out from the tags must capture it too.
	Later map[string]string
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

// CoreSink publishes on an ApConnection (core NATS): at most once, with
// the connection's ledger carrying publishes across its switches. It is
// the Bridge's default Sink; a sink that adds to each message before it
// leaves (the fleet's lease check) wraps it.
type CoreSink struct{ conn *apconn.Conn }

// NewCoreSink returns the sink that publishes on conn.
func NewCoreSink(conn *apconn.Conn) *CoreSink { return &CoreSink{conn: conn} }

// Publish implements Sink: m goes out on the active connection, and the
// connection keeps its payload and header strings for replay until a
// broker confirms it (apconn.Conn.PublishOwned): neither m nor its header
// map, which are the caller's again when Publish returns.
func (s *CoreSink) Publish(_ string, m *nats.Msg, _ *wire.Update) error {
	return s.conn.PublishOwned(m)
}

// Flush implements Sink: it waits until the brokers have confirmed every
// update published before the call, across a switch of the connection.
func (s *CoreSink) Flush(ctx context.Context) error { return s.conn.Flush(ctx) }

// ErrClosed is returned by what waits for a bridge that was closed.
var ErrClosed = errors.New("bridge: closed")

// ErrSinkClosed is returned by Publish and Flush of a closed sink.
var ErrSinkClosed = errors.New("bridge: sink closed")
