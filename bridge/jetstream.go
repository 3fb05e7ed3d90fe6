package bridge

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ErrSinkClosed is returned by Publish and Flush of a closed sink.
var ErrSinkClosed = errors.New("bridge: sink closed")

// MessageID returns the JetStream message ID (the Nats-Msg-Id header) of
// an update of source: a hash of the source's own identity of the update,
// its source name, tag, timestamp (the source timestamp, or the server
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

// JetStreamOption configures a JetStreamSink.
type JetStreamOption func(*JetStreamSink)

// WithJetStreamLogger logs through l (default: no logging).
func WithJetStreamLogger(l zerolog.Logger) JetStreamOption {
	return func(s *JetStreamSink) { s.log = l }
}

// JetStreamSink is a Sink that stores every update in a JetStream stream,
// exactly once by message ID (MessageID), through broker maintenance,
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
type JetStreamSink struct {
	conn *apconn.Conn
	cfg  JetStreamConfig
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

	healthMu sync.Mutex
	health   JetStreamHealth

	stats jsCounters
}

// jsLink is a JetStream context on one active nats.Conn.
type jsLink struct {
	gen uint64
	nc  *nats.Conn
	js  jetstream.JetStream
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

	prev, next *jsEntry // publish order
	nextSame   *jsEntry // the tag's next update
}

// jsSubject is the queue of one tag subject: head is in flight (or due for
// a retry), the rest wait behind it.
type jsSubject struct{ head, tail *jsEntry }

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
	conflicts                                 atomic.Uint64
}

// NewJetStreamSink returns a sink that stores updates in the stream cfg
// names, publishing on conn's active connection. If cfg.Subjects is set,
// the stream is made ready now (created if missing, refused if an existing
// one differs); otherwise it is when the Bridge starts, with subjects
// worked out from its tags. ctx bounds the stream set-up. Close the sink
// after the Bridge.
func NewJetStreamSink(ctx context.Context, conn *apconn.Conn, cfg JetStreamConfig, opts ...JetStreamOption) (*JetStreamSink, error) {
	if conn == nil {
		return nil, errors.New("bridge: jetstream: nil connection")
	}
	cfg.setDefaults()
	sc, err := cfg.validated()
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	s := &JetStreamSink{
		conn:     conn,
		cfg:      cfg,
		want:     streamWant{cfg: sc},
		log:      zerolog.Nop(),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		byMsg:    map[*nats.Msg]*jsEntry{},
		subjects: map[string]*jsSubject{},
	}
	s.space.L = &s.mu
	for _, o := range opts {
		o(s)
	}
	s.log = s.log.With().Str("component", "jetstream").Str("stream", cfg.Stream).Logger()
	s.health = JetStreamHealth{Stream: cfg.Stream, Replicas: cfg.Replicas, Criticals: []string{"not checked yet"}}
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

func (s *JetStreamSink) newLink(nc *nats.Conn) (*jsLink, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncAckHandler(s.onAck),
		jetstream.WithPublishAsyncErrHandler(s.onErr),
		// The window bounds what is in flight; this only has to stay out
		// of the way (an entry can have two publishes outstanding after a
		// leader election).
		jetstream.WithPublishAsyncMaxPending(2*s.cfg.MaxPending+64),
		jetstream.WithPublishAsyncTimeout(s.cfg.AckTimeout))
	if err != nil {
		return nil, fmt.Errorf("bridge: jetstream: %w", err)
	}
	return &jsLink{nc: nc, js: js}, nil
}

// Config returns the sink's configuration with its defaults applied.
func (s *JetStreamSink) Config() JetStreamConfig { return s.cfg }

// Publish implements Sink: it sets the message ID and queues m in the
// pending window, blocking while the window is full. It returns an error
// only for an update the stream could never take (too large, or on a
// subject the stream does not capture) or when the sink is closed.
func (s *JetStreamSink) Publish(source string, m *nats.Msg, u *Update) error {
	if m.Header == nil {
		m.Header = make(nats.Header, 2)
	}
	m.Header[jetstream.MsgIDHeader] = []string{MessageID(source, u)}
	m.Header[jetstream.ExpectedStreamHeader] = []string{s.cfg.Stream}
	size := msgSize(m)
	patterns, maxMsg, err := s.streamReady()
	if err != nil {
		return err
	}
	if maxMsg > 0 && size > maxMsg {
		return fmt.Errorf("bridge: jetstream: tag %q: update of %d bytes is larger than the stream's maxMsgSize %d", u.Tag, size, maxMsg)
	}
	e := &jsEntry{msg: m, subject: m.Subject, size: size, queuedAt: time.Now()}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrSinkClosed
	}
	q := s.subjects[m.Subject]
	if q == nil {
		if !coveredBy(m.Subject, patterns) {
			s.mu.Unlock()
			return fmt.Errorf("bridge: jetstream: tag %q: subject %q is not captured by stream %q (subjects %v)", u.Tag, m.Subject, s.cfg.Stream, patterns)
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
		return ErrSinkClosed
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

// sendingLocked marks e as sent on the current link and returns the link.
func (s *JetStreamSink) sendingLocked(e *jsEntry, now time.Time) *jsLink {
	e.state = stSent
	e.sentJS = s.link.js
	e.sentAt = now
	return s.link
}

// errNotConnected holds a send while the link's connection is away (it
// comes back, or the ApConnection switches): a publish buffered by
// nats.go for a reconnect would only be sent again after its ack timeout.
var errNotConnected = errors.New("not connected")

func (s *JetStreamSink) send(l *jsLink, e *jsEntry) {
	if !l.nc.IsConnected() {
		s.onErr(l.js, e.msg, errNotConnected)
		return
	}
	if _, err := l.js.PublishMsgAsync(e.msg); err != nil {
		s.onErr(l.js, e.msg, err)
	}
}

// onAck is called by nats.go's jetstream package for every acknowledgement
// (on the reply subscription's goroutine, without its locks held): from
// any link, the first one settles the update.
func (s *JetStreamSink) onAck(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	s.mu.Lock()
	e := s.byMsg[m]
	if e == nil {
		s.mu.Unlock()
		return
	}
	s.stats.acked.Add(1)
	if ack.Duplicate {
		s.stats.duplicates.Add(1)
	}
	next, link := s.doneLocked(e)
	s.mu.Unlock()
	if next != nil {
		s.send(link, next)
	}
}

// doneLocked takes a settled update out of the window and returns its
// tag's next update, now marked sent on the returned link.
func (s *JetStreamSink) doneLocked(e *jsEntry) (*jsEntry, *jsLink) {
	e.state = stDone
	delete(s.byMsg, e.msg)
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
	s.count--
	s.bytes -= e.size
	if s.waiters > 0 {
		s.space.Broadcast()
	}
	if s.full.on && s.count <= s.cfg.MaxPending/2 && s.bytes <= s.cfg.MaxPendingBytes/2 {
		s.windowDrainedLocked(time.Now())
	}
	if len(s.flushers) > 0 {
		low := uint64(1<<64 - 1)
		if s.head != nil {
			low = s.head.seq
		}
		kept := s.flushers[:0]
		for _, f := range s.flushers {
			if f.upTo < low {
				close(f.ch)
			} else {
				kept = append(kept, f)
			}
		}
		clear(s.flushers[len(kept):])
		s.flushers = kept
	}
	q := s.subjects[e.subject]
	n := e.nextSame
	e.nextSame = nil
	q.head = n
	if n == nil {
		q.tail = nil
		return nil, nil
	}
	if s.closed {
		return nil, nil
	}
	return n, s.sendingLocked(n, time.Now())
}

// onErr is called for a publish that failed: by nats.go's jetstream
// package (an error reply, an ack timeout with its own lock held, a lost
// connection) and by send. It never sends: the pump does.
func (s *JetStreamSink) onErr(js jetstream.JetStream, m *nats.Msg, err error) {
	now := time.Now()
	s.mu.Lock()
	e := s.byMsg[m]
	// Stale: settled already, or sent again since on another context.
	if e == nil || e.state != stSent || e.sentJS != js {
		s.mu.Unlock()
		return
	}
	if permanent(err) {
		s.stats.rejected.Add(1)
		next, _ := s.doneLocked(e)
		if next != nil { // the pump sends it
			next.state = stRetry
			s.retry = append(s.retry, next)
		}
		s.mu.Unlock()
		s.log.Error().Err(err).Str("subject", e.subject).Str("msg_id", m.Header.Get(jetstream.MsgIDHeader)).
			Msg("the stream rejected an update for good: it is not stored")
		s.wake()
		return
	}
	e.state = stRetry
	if errors.Is(err, errNotConnected) {
		e.retryAt = now.Add(100 * time.Millisecond)
		s.retry = append(s.retry, e)
		s.mu.Unlock()
		s.wake()
		return
	}
	e.attempts++
	if conflict(err) {
		// Another copy of this update (from the other hot-hot relay, or
		// sent again) is being stored right now: ask again shortly, and
		// the answer will be "duplicate".
		s.stats.conflicts.Add(1)
		e.retryAt = now.Add(5 * time.Millisecond)
		s.retry = append(s.retry, e)
		s.mu.Unlock()
		s.wake()
		return
	}
	if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		s.stats.timeouts.Add(1)
		e.retryAt = now // the wait is over already
	} else {
		s.stats.errors.Add(1)
		e.retryAt = now.Add(backoff(e.attempts))
	}
	s.retry = append(s.retry, e)
	ok, held := s.errLog.allow(now, 10*time.Second)
	s.mu.Unlock()
	if ok {
		s.log.Warn().Err(err).Str("subject", e.subject).Int("held_back", held).
			Msg("publish not acknowledged by the stream: sending it again (one line per 10 s)")
	}
	s.wake()
}

// permanent reports errors that sending again cannot cure: the message is
// too large for the stream or the server.
func permanent(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10054, 10097: // message or header exceeds the stream's maximum
			return true
		}
	}
	return false
}

// conflict reports the stream's answer to a message whose ID it is
// storing at this moment.
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10158
}

// backoff is the wait before the n-th retry after an error reply: 20 ms
// doubling to 1 s.
func backoff(n int) time.Duration {
	d := 20 * time.Millisecond
	for i := 1; i < n && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

func (s *JetStreamSink) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// pump sends what is due for a retry, in publish order, and keeps the
// link on the ApConnection's active connection.
func (s *JetStreamSink) pump() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	check := time.NewTicker(time.Second)
	defer check.Stop()
	var due []*jsEntry
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		now := time.Now()
		var next time.Time
		due = due[:0]
		kept := s.retry[:0]
		for _, e := range s.retry {
			switch {
			case e.state != stRetry:
			case !e.retryAt.After(now):
				due = append(due, e)
			default:
				kept = append(kept, e)
				if next.IsZero() || e.retryAt.Before(next) {
					next = e.retryAt
				}
			}
		}
		clear(s.retry[len(kept):])
		s.retry = kept
		slices.SortFunc(due, func(a, b *jsEntry) int { return compareSeq(a.seq, b.seq) })
		link := s.link
		if len(due) > 0 && !link.nc.IsConnected() {
			// Held until the connection is back or replaced.
			later := now.Add(100 * time.Millisecond)
			for _, e := range due {
				e.retryAt = later
				s.retry = append(s.retry, e)
			}
			due = due[:0]
			if next.IsZero() || later.Before(next) {
				next = later
			}
		}
		for _, e := range due {
			s.sendingLocked(e, now)
		}
		s.mu.Unlock()
		for _, e := range due {
			s.stats.republished.Add(1)
			s.send(link, e)
		}
		clear(due)
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-s.done:
			return
		case <-s.kick:
		case <-timer.C:
		case <-check.C:
			s.relink()
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *JetStreamSink) onConnEvent(e apconn.Event) {
	switch e.Kind {
	case apconn.EventSwitched:
		s.relink()
	case apconn.EventReconnected:
		// The same nats.Conn is back: what failed while it was away is
		// sent now rather than at its backoff.
		s.mu.Lock()
		for _, r := range s.retry {
			r.retryAt = time.Time{}
		}
		s.mu.Unlock()
		s.wake()
	}
}

// relink moves publishing to the ApConnection's active nats.Conn if it
// changed, and sends every unacknowledged update again on it, in order.
func (s *JetStreamSink) relink() {
	nc := s.conn.Active()
	if nc == nil {
		return
	}
	s.mu.Lock()
	if s.closed || s.link.nc == nc {
		s.mu.Unlock()
		return
	}
	l, err := s.newLink(nc)
	if err != nil {
		s.mu.Unlock()
		s.log.Error().Err(err).Msg("no JetStream context on the new active connection")
		return
	}
	s.gen++
	l.gen = s.gen
	s.link = l
	n := s.resendAllLocked()
	s.mu.Unlock()
	s.stats.switches.Add(1)
	s.log.Info().Str("server", nc.ConnectedServerName()).Int("republishing", n).
		Msg("publishing moved to the new active connection: unacknowledged updates are sent again")
	s.wake()
}

// resendAllLocked marks every update in flight for an immediate resend
// and returns how many.
func (s *JetStreamSink) resendAllLocked() int {
	n := 0
	for e := s.head; e != nil; e = e.next {
		switch e.state {
		case stSent:
			e.state = stRetry
			e.retryAt = time.Time{}
			s.retry = append(s.retry, e)
			n++
		case stRetry:
			e.retryAt = time.Time{}
		}
	}
	return n
}

func (s *JetStreamSink) onLeaderElected(m *nats.Msg) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	n := s.resendAllLocked()
	s.mu.Unlock()
	s.stats.leaderResends.Add(1)
	s.log.Info().Int("republishing", n).Msg("stream leader elected: unacknowledged updates are sent again")
	s.wake()
}

// windowFullLocked starts or continues a full-window episode: one log
// line when it starts, at most one a minute.
func (s *JetStreamSink) windowFullLocked(now time.Time) {
	f := &s.full
	f.blocked++
	if f.on {
		return
	}
	f.on, f.since, f.blocked = true, now, 1
	if !f.lastLog.IsZero() && now.Sub(f.lastLog) < time.Minute {
		f.unlogged++
		return
	}
	f.lastLog = now
	s.log.Warn().Int("pending", s.count).Int("pending_bytes", s.bytes).Int("maxPending", s.cfg.MaxPending).
		Int("maxPendingBytes", s.cfg.MaxPendingBytes).Int("episodes_not_logged", f.unlogged).
		Msg("pending window full: publishing blocks until the stream acknowledges (backpressure on the source)")
	f.unlogged = 0
}

func (s *JetStreamSink) windowDrainedLocked(now time.Time) {
	f := &s.full
	f.on = false
	if f.lastLog.Before(f.since) || f.lastLog.IsZero() {
		return // this episode was not logged: neither is its end
	}
	s.log.Info().Dur("full_for", now.Sub(f.since)).Int("publishes_blocked", f.blocked).
		Msg("pending window drained: backpressure released")
}

// Flush implements Sink: it waits until every update published before the
// call is acknowledged by the stream (or given up, which is logged), or
// ctx ends.
func (s *JetStreamSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrSinkClosed
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
			return ErrSinkClosed
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

// abort is called by Bridge.Shutdown when its context ends before the
// sources have stopped: blocked and later publishes fail at once.
func (s *JetStreamSink) abort() { s.Close() }

// Close stops the sink: blocked and later Publish and Flush calls return
// ErrSinkClosed, and updates not yet acknowledged are abandoned (a log
// line counts them). Call Flush first to wait for them. Close is
// idempotent and waits for the sink's goroutines.
func (s *JetStreamSink) Close() error {
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

// JetStreamStats are the sink's counters since it was created.
type JetStreamStats struct {
	// Published counts updates accepted by Publish.
	Published uint64 `json:"published"`
	// Acked counts updates the stream acknowledged, Duplicates those of
	// them it already had (sent again, or by another relay).
	Acked      uint64 `json:"acked"`
	Duplicates uint64 `json:"duplicates"`
	// Republished counts sends after the first: after a switch, a
	// leader election, an ack timeout or an error.
	Republished uint64 `json:"republished"`
	// Timeouts and Errors count publishes that were not acknowledged in
	// AckTimeout or got an error reply; both are sent again.
	Timeouts uint64 `json:"timeouts"`
	Errors   uint64 `json:"errors"`
	// Conflicts counts publishes answered "the stream is storing this
	// message ID right now" (normal with hot-hot relays): sent again
	// 5 ms later, they come back as duplicates.
	Conflicts uint64 `json:"conflicts"`
	// Rejected counts updates the stream refused for good (too large):
	// not stored, each logged.
	Rejected uint64 `json:"rejected"`
	// Blocked counts Publish calls that waited for room in the window,
	// BlockedMs the time they waited.
	Blocked   uint64  `json:"blocked"`
	BlockedMs float64 `json:"blockedMs"`
	// Switches counts moves to a new active connection, LeaderElections
	// the stream leader elections that caused a resend.
	Switches        uint64 `json:"switches"`
	LeaderElections uint64 `json:"leaderElections"`
	// Pending and PendingBytes are the window now; OldestPendingMs the
	// age of its oldest update.
	Pending         int     `json:"pending"`
	PendingBytes    int     `json:"pendingBytes"`
	OldestPendingMs float64 `json:"oldestPendingMs"`
	// WindowFull reports Publish blocking now.
	WindowFull bool `json:"windowFull"`
}

// Stats returns the sink's counters.
func (s *JetStreamSink) Stats() JetStreamStats {
	c := &s.stats
	st := JetStreamStats{
		Published: c.published.Load(), Acked: c.acked.Load(), Duplicates: c.duplicates.Load(),
		Republished: c.republished.Load(), Timeouts: c.timeouts.Load(), Errors: c.errors.Load(),
		Conflicts: c.conflicts.Load(), Rejected: c.rejected.Load(), Blocked: c.blocked.Load(),
		BlockedMs: float64(c.blockedNanos.Load()) / 1e6,
		Switches:  c.switches.Load(), LeaderElections: c.leaderResends.Load(),
	}
	s.mu.Lock()
	st.Pending, st.PendingBytes, st.WindowFull = s.count, s.bytes, s.full.on
	if s.head != nil {
		st.OldestPendingMs = float64(time.Since(s.head.queuedAt).Microseconds()) / 1000
	}
	s.mu.Unlock()
	return st
}
