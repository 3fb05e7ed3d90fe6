package jetstreamsink

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/apbridge/apbridge/internal/jsapi"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A fence keeps a tag's updates in order in the stream when two publishers
// store the same source for a while, as a fleet's relays do while a pair
// changes hands (the old owner keeps publishing until the new one is, make
// before break). The stream drops the updates both send by their message
// ID, but an update only the lagging one sends would be stored after a
// newer one of the other: the tag would go back in time.
//
// Each publisher's updates carry its fencing token, which grows with every
// change of owner. Every update but a tag's first names the stream
// sequence of the tag's newest message the sink knows of
// (Nats-Expected-Last-Subject-Sequence). When another publisher stored on
// the subject since, the stream refuses the update and names the newest
// message; the sink reads that message's token. A higher token means the
// tag has a newer owner: the update is not stored, nor is any later update
// of the tag from this sink (counted in Stats.Fenced). A lower or equal
// token means this sink is the newer owner: the update is sent again after
// that message.

// The stream's answers to an update whose expected last sequence is not
// the subject's: a stream of one replica names the subject's sequence
// (nats-server's JSStreamWrongLastSequenceErr), a replicated one does not
// (JSStreamWrongLastSequenceConstantErr).
const (
	errCodeWrongLastSequence         = 10071
	errCodeWrongLastSequenceConstant = 10164
)

// WithFence turns the fence on: header is the message header that carries
// the publisher's fencing token, a decimal number that a newer owner of
// the source makes larger (a fleet relay's lease token). Updates without
// the header are not fenced.
func WithFence(header string) Option {
	return func(o *options) error {
		if header == "" {
			return fmt.Errorf("bridge: jetstream: fence header: empty (want a header name)")
		}
		o.fence = header
		return nil
	}
}

// tokenOf returns the fencing token m carries, 0 if none.
func (s *Sink) tokenOf(m *nats.Msg) uint64 {
	if s.fence == "" {
		return 0
	}
	t, _ := strconv.ParseUint(m.Header.Get(s.fence), 10, 64)
	return t
}

// expectLocked sets the sequence the stream must hold as e's subject's
// newest message for e to be stored; a tag's first update expects none.
// The header is written only when it changes: a send of e on the old link
// may still be encoding it after a switch, and the expectation cannot
// change while e is in flight (only e's own outcome moves it).
func (s *Sink) expectLocked(e *jsEntry) {
	if e.token == 0 {
		return
	}
	var want []string
	if q := s.subjects[e.subject]; q != nil {
		want = q.expect
	}
	cur := e.msg.Header[jetstream.ExpectedLastSubjSeqHeader]
	if len(cur) == len(want) && (len(cur) == 0 || cur[0] == want[0]) {
		return
	}
	if want == nil {
		delete(e.msg.Header, jetstream.ExpectedLastSubjSeqHeader)
		return
	}
	e.msg.Header[jetstream.ExpectedLastSubjSeqHeader] = want
}

// setLast records seq as the subject's newest message, and formats the
// expectation once for the updates that follow, not once per send. The
// slice is shared by their headers and never changed, only replaced.
func (q *jsSubject) setLast(seq uint64) {
	q.last, q.expect = seq, nil
	if seq > 0 {
		q.expect = []string{strconv.FormatUint(seq, 10)}
	}
}

// storedLocked records seq, the stream sequence an update of e's subject
// was stored at.
func (s *Sink) storedLocked(e *jsEntry, seq uint64) {
	if q := s.subjects[e.subject]; q != nil && e.token != 0 && seq > q.last {
		q.setLast(seq)
	}
}

// fencedLocked reports whether a newer owner stored e's subject: e is not
// to be sent.
func (s *Sink) fencedLocked(e *jsEntry) bool {
	q := s.subjects[e.subject]
	return e.token != 0 && q != nil && e.token < q.fencedBy
}

// wrongLast reports the stream's refusal of an update's expected last
// sequence.
func wrongLast(err error) bool {
	return publishErrorIs(err, errCodeWrongLastSequence, errCodeWrongLastSequenceConstant)
}

// settleFencedLocked takes e, which a newer owner's update superseded, out
// of the window. It returns the tag's next update, marked sent on the
// returned link, for the caller to send.
func (s *Sink) settleFencedLocked(e *jsEntry, by uint64) (*jsEntry, *jsLink) {
	if q := s.subjects[e.subject]; q != nil {
		q.fencedBy = max(q.fencedBy, by)
	}
	s.stats.fenced.Add(1)
	if ok, held := s.fenceLog.allow(time.Now(), 10*time.Second); ok {
		s.log.Info().Str("subject", e.subject).Uint64("token", e.token).Uint64("newer_token", by).Int("not_logged", held).
			Msg("fenced: a newer owner stores this tag; its updates from here are not stored (one line per 10 s)")
	}
	return s.doneLocked(e)
}

// maxLookups bounds the fence's reads in flight. At a handover the old
// owner's next update of every tag is refused, thousands at once at plant
// scale; read one after another, they would hold the relay's whole window
// (and so its other sources) for thousands of round trips.
const maxLookups = 32

// startResolve resolves e on a goroutine of its own, at most maxLookups
// at a time; it waits for room, or returns at Close.
func (s *Sink) startResolve(l *jsLink, e *jsEntry) {
	select {
	case s.lookups <- struct{}{}:
	case <-s.done:
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.lookups }()
		s.resolve(l, e)
	}()
}

// resolve looks up the message a refused update's subject ended at, and
// settles e or sends it again: see the fence above. It runs without the
// lock.
func (s *Sink) resolve(l *jsLink, e *jsEntry) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.AckTimeout)
	seq, token, id, err := s.newestOn(ctx, l.nc, e.subject)
	cancel()
	now := time.Now()
	s.mu.Lock()
	if s.byMsg[e.msg] != e || e.state != stRetry {
		s.mu.Unlock()
		return
	}
	var next *jsEntry
	var link *jsLink
	switch {
	case err != nil:
		e.attempts++
		e.retryAt = now.Add(backoff(e.attempts))
		s.retry = append(s.retry, e)
		s.mu.Unlock()
		s.log.Warn().Err(err).Str("subject", e.subject).Msg("fence: reading the tag's newest message failed: trying again")
		s.wake()
		return
	case id == e.msg.Header.Get(jetstream.MsgIDHeader):
		// The update itself, stored by an earlier send whose ack was lost.
		s.storedLocked(e, seq)
		s.stats.acked.Add(1)
		s.stats.duplicates.Add(1)
		next, link = s.doneLocked(e)
	case token > e.token:
		next, link = s.settleFencedLocked(e, token)
	default:
		// The stream's answer is the truth, also when it is older than
		// what the sink knew (the tag's messages were removed by a limit).
		if q := s.subjects[e.subject]; q != nil {
			q.setLast(seq)
		}
		e.check = false
		next, link = e, s.sendingLocked(e, now)
	}
	s.mu.Unlock()
	if next != nil {
		s.send(link, next)
	}
}

// newestOn reads the newest message the stream holds on subject: its
// sequence, fencing token (0 if none) and message ID.
func (s *Sink) newestOn(ctx context.Context, nc *nats.Conn, subject string) (seq, token uint64, id string, err error) {
	m, err := jsapi.LastFor(ctx, nc, APISubject(s.cfg.Domain, fmt.Sprintf(api.JSApiMsgGetT, s.cfg.Stream)), subject)
	if err != nil || m == nil {
		return 0, 0, "", err // nil: the tag has no message left, expect none
	}
	if len(m.Header) == 0 {
		return m.Sequence, 0, "", nil
	}
	h, err := nats.DecodeHeadersMsg(m.Header)
	if err != nil {
		return 0, 0, "", fmt.Errorf("message %d: headers: %w", m.Sequence, err)
	}
	token, _ = strconv.ParseUint(h.Get(s.fence), 10, 64)
	return m.Sequence, token, h.Get(jetstream.MsgIDHeader), nil
}
