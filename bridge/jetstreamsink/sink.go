package jetstreamsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Option configures a Sink. An option that cannot apply returns an error,
// which New returns.
type Option func(*options) error

type options struct {
	log   zerolog.Logger
	fence string
}

// WithLogger logs through l (default: no logging).
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// Sink is a bridge.Sink that stores every update in a JetStream stream,
// exactly once by message ID (wire.MessageID), through broker maintenance,
// broker death, stream leader changes and source failover.
//
// Publishes are asynchronous, on the ApConnection's current active
// nats.Conn, and stay in a bounded pending window until the stream
// acknowledges them. Each tag has at most one update in flight: a tag's
// next update is sent when the previous one is acknowledged, so that a
// lost publish followed by a stored one can never reorder a tag in the
// stream. After a switch of the ApConnection, an ack timeout, a lost
// connection or a stream leader election, every unacknowledged update is
// sent again, in order, and the stream's duplicate window drops the copies
// it already has. When the window is full, Publish blocks (backpressure
// toward the source); nothing is dropped silently.
type Sink struct {
	conn *apconn.Conn
	cfg  Config
	want streamWant
	log  zerolog.Logger

	stopEvent func()
	adv       *apconn.Subscription
	kick      chan struct{}
	done      chan struct{}
	ctx       context.Context // ends at Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	streamMu sync.Mutex // serializes stream set-up
	ensured  bool       // guarded by streamMu
	state    atomic.Pointer[streamState]

	mu       sync.Mutex
	space    sync.Cond // on mu: the window has room, or the sink closed
	closed   bool
	link     *jsLink
	gen      uint64
	byMsg    map[*nats.Msg]*jsEntry
	subjects map[string]*jsSubject
	head     *jsEntry // pending updates in publish order
	tail     *jsEntry
	count    int
	bytes    int
	seq      uint64
	retry    []*jsEntry
	waiters  int
	flushers []jsFlusher
	full     fullEpisode
	errLog   rateLog

	fence    string // the header of the fencing token; "" when not fenced
	fenceLog rateLog
	lookups  chan struct{} // bounds the fence's reads in flight

	healthMu sync.Mutex
	health   Health

	stats jsCounters
}

type entryState int

const (
	stWaiting entryState = iota // behind an earlier update of its tag
	stSent                      // sent, acknowledgement awaited
	stRetry                     // to be sent (again) at retryAt
	stDone                      // acknowledged or given up
)

// jsEntry is one pending update.
type jsEntry struct {
	seq      uint64
	msg      *nats.Msg
	subject  string
	size     int
	state    entryState
	queuedAt time.Time
	sentJS   jetstream.JetStream // the context of its latest send
	sentAt   time.Time
	retryAt  time.Time
	attempts int
	token    uint64 // the fencing token it carries; 0: none
	check    bool   // the stream refused its expectation: look the subject up first

	prev, next *jsEntry // publish order
	nextSame   *jsEntry // the tag's next update
}

// jsSubject is the queue of one tag subject: head is in flight (or due for
// a retry), the rest wait behind it. With a fence, last is the stream
// sequence of the subject's newest message this sink knows of (0:
// unknown), expect its header value, and fencedBy the highest token of
// another publisher found stored on it.
type jsSubject struct {
	head, tail     *jsEntry
	last, fencedBy uint64
	expect         []string
}

type jsFlusher struct {
	upTo uint64
	ch   chan struct{}
}

// fullEpisode tracks the window being full, for one log line per episode
// (and at most one a minute under sustained overload).
type fullEpisode struct {
	on       bool
	since    time.Time
	blocked  int
	lastLog  time.Time
	unlogged int
}

// rateLog lets a repeated warning through once per period with a count of
// what it held back.
type rateLog struct {
	last       time.Time
	suppressed int
}

func (r *rateLog) allow(now time.Time, period time.Duration) (ok bool, suppressed int) {
	if !r.last.IsZero() && now.Sub(r.last) < period {
		r.suppressed++
		return false, 0
	}
	r.last, suppressed, r.suppressed = now, r.suppressed, 0
	return true, suppressed
}

type jsCounters struct {
	published, acked, duplicates, republished atomic.Uint64
	timeouts, errors, rejected, blocked       atomic.Uint64
	blockedNanos, switches, leaderResends     atomic.Uint64
	conflicts, fenced                         atomic.Uint64
}

// New returns a sink that stores updates in the stream cfg
// names, publishing on conn's active connection. If cfg.Subjects is set,
// the stream is made ready now (created if missing, refused if an existing
// one differs); otherwise it is when the Bridge starts, with subjects
// worked out from its tags. ctx bounds the stream set-up. Close the sink
// after the Bridge.
func New(ctx context.Context, conn *apconn.Conn, cfg Config, opts ...Option) (*Sink, error) {
	if conn == nil {
		return nil, errors.New("bridge: jetstream: nil connection")
	}
	cfg.setDefaults()
	sc, err := cfg.validated()
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	o := options{log: zerolog.Nop()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("bridge: jetstream: %w", err)
		}
	}
	s := &Sink{
		conn:     conn,
		cfg:      cfg,
		want:     streamWant{cfg: sc},
		log:      o.log.With().Str("component", "jetstream").Str("stream", cfg.Stream).Logger(),
		fence:    o.fence,
		lookups:  make(chan struct{}, maxLookups),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		byMsg:    map[*nats.Msg]*jsEntry{},
		subjects: map[string]*jsSubject{},
	}
	s.space.L = &s.mu
	s.health = Health{Stream: cfg.Stream, Replicas: cfg.Replicas, Criticals: []string{"not checked yet"}}
	if len(cfg.Subjects) > 0 {
		if err := s.ensureStream(ctx, cfg.Subjects); err != nil {
			return nil, err
		}
	}
	nc := conn.Active()
	if nc == nil {
		return nil, errors.New("bridge: jetstream: the connection has no active nats.Conn")
	}
	l, err := s.newLink(nc)
	if err != nil {
		return nil, err
	}
	s.link = l
	// A leader election means publishes in flight to the old leader may be
	// lost: send them again at once rather than after the ack timeout.
	s.adv, err = conn.Subscribe("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."+cfg.Stream, s.onLeaderElected)
	if err != nil {
		return nil, fmt.Errorf("bridge: jetstream: subscribe to leader advisories: %w", err)
	}
	s.stopEvent = conn.OnEvent(s.onConnEvent)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(2)
	go s.pump()
	go s.healthLoop()
	return s, nil
}

// Config returns the sink's configuration with its defaults applied.
func (s *Sink) Config() Config { return s.cfg }

// Publish implements Sink: it sets the message ID and queues m in the
// pending window, blocking while the window is full. It returns an error
// only for an update the stream could never take (too large, or on a
// subject the stream does not capture) or when the sink is closed.
func (s *Sink) Publish(source string, m *nats.Msg, u *wire.Update) error {
	if m.Header == nil {
		m.Header = make(nats.Header, 2)
	}
	m.Header[jetstream.MsgIDHeader] = []string{wire.MessageID(source, u)}
	m.Header[jetstream.ExpectedStreamHeader] = []string{s.cfg.Stream}
	size := msgSize(m)
	st, err := s.streamReady()
	if err != nil {
		return err
	}
	if st.maxMsg > 0 && size > st.maxMsg {
		return fmt.Errorf("bridge: jetstream: tag %q: update of %d bytes is larger than the stream's maxMsgSize %d", u.Tag, size, st.maxMsg)
	}
	e := &jsEntry{msg: m, subject: m.Subject, size: size, queuedAt: time.Now(), token: s.tokenOf(m)}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return bridge.ErrSinkClosed
	}
	q := s.subjects[m.Subject]
	if q == nil {
		if _, ok := st.capture.Covering(m.Subject); !ok {
			s.mu.Unlock()
			return fmt.Errorf("bridge: jetstream: tag %q: subject %q is not captured by stream %q (subjects %v)", u.Tag, m.Subject, s.cfg.Stream, st.subjects)
		}
		q = &jsSubject{}
		s.subjects[m.Subject] = q
	}
	var start time.Time
	for !s.closed && s.count > 0 && (s.count >= s.cfg.MaxPending || s.bytes+size > s.cfg.MaxPendingBytes) {
		if start.IsZero() {
			start = time.Now()
			s.stats.blocked.Add(1)
			s.windowFullLocked(start)
		}
		s.waiters++
		s.space.Wait()
		s.waiters--
	}
	if !start.IsZero() {
		s.stats.blockedNanos.Add(uint64(time.Since(start)))
	}
	if s.closed {
		s.mu.Unlock()
		return bridge.ErrSinkClosed
	}
	s.seq++
	e.seq = s.seq
	e.prev = s.tail
	if s.tail != nil {
		s.tail.next = e
	} else {
		s.head = e
	}
	s.tail = e
	s.count++
	s.bytes += size
	s.byMsg[m] = e
	s.stats.published.Add(1)
	var link *jsLink
	if q.head == nil {
		q.head, q.tail = e, e
		link = s.sendingLocked(e, time.Now())
	} else {
		q.tail.nextSame = e
		q.tail = e
		e.state = stWaiting
	}
	s.mu.Unlock()
	if link != nil {
		s.send(link, e)
	}
	return nil
}

// msgSize is what a message costs in the window and against the stream's
// maxMsgSize: subject, headers and payload.
func msgSize(m *nats.Msg) int {
	n := len(m.Subject) + len(m.Data) + 12
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// Flush implements Sink: it waits until every update published before the
// call is acknowledged by the stream (or given up, which is logged), or
// ctx ends.
func (s *Sink) Flush(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return bridge.ErrSinkClosed
	}
	if s.head == nil {
		s.mu.Unlock()
		return nil
	}
	f := jsFlusher{upTo: s.seq, ch: make(chan struct{})}
	s.flushers = append(s.flushers, f)
	pending := s.count
	s.mu.Unlock()
	select {
	case <-f.ch:
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return bridge.ErrSinkClosed
		}
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		s.flushers = slices.DeleteFunc(s.flushers, func(x jsFlusher) bool { return x.ch == f.ch })
		now := s.count
		s.mu.Unlock()
		return fmt.Errorf("bridge: jetstream: %d of %d updates still unacknowledged: %w", now, pending, ctx.Err())
	}
}

// Abort implements bridge.Aborter: Bridge.Shutdown calls it when its
// context ends before the sink has drained, so that a source blocked in a
// full window returns at once. It closes the sink.
func (s *Sink) Abort() { s.Close() }

// Close stops the sink: blocked and later Publish and Flush calls return
// ErrSinkClosed, and updates not yet acknowledged are abandoned (a log
// line counts them). Call Flush first to wait for them. Close is
// idempotent and waits for the sink's goroutines.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		abandoned := s.count
		for _, f := range s.flushers {
			close(f.ch)
		}
		s.flushers = nil
		s.space.Broadcast()
		s.mu.Unlock()
		close(s.done)
		s.cancel()
		if s.stopEvent != nil {
			s.stopEvent()
		}
		if s.adv != nil {
			s.adv.Unsubscribe()
		}
		s.wg.Wait()
		if abandoned > 0 {
			s.log.Warn().Int("updates", abandoned).Msg("closed with updates not acknowledged by the stream: they are not known to be stored")
		}
	})
	return nil
}
