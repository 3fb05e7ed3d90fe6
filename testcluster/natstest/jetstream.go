package natstest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NodeByName returns the node whose server name is name (n1, n2, ...), or
// nil.
func (c *Cluster) NodeByName(name string) *Node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// connectAny connects a short-lived client to the first running node that
// answers.
func (c *Cluster) connectAny() (*nats.Conn, error) {
	var lastErr error = errors.New("no node is running")
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		opts := append(c.ClientOptions(), nats.Name("testcluster-js"), nats.NoReconnect(), nats.Timeout(2*time.Second))
		nc, err := nats.Connect(n.DirectURL(), opts...)
		if err == nil {
			return nc, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// StreamState is where a stream's replicas are.
type StreamState struct {
	// Leader is the name of the node that leads the stream ("" if none).
	Leader string
	// Replicas is the configured replica count.
	Replicas int
	// Current names the peers (the leader included) that are online and
	// caught up.
	Current []string
	// Msgs and LastSeq are the stream's message count and last sequence.
	Msgs    uint64
	LastSeq uint64
}

// StreamState asks a running node for the stream's cluster state.
func (c *Cluster) StreamState(ctx context.Context, stream string) (StreamState, error) {
	nc, err := c.connectAny()
	if err != nil {
		return StreamState{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return StreamState{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(rctx, stream)
	if err != nil {
		return StreamState{}, err
	}
	info := s.CachedInfo()
	st := StreamState{Replicas: max(info.Config.Replicas, 1), Msgs: info.State.Msgs, LastSeq: info.State.LastSeq}
	if cl := info.Cluster; cl != nil {
		st.Leader = cl.Leader
		if cl.Leader != "" {
			st.Current = append(st.Current, cl.Leader)
		}
		for _, p := range cl.Replicas {
			if p.Current && !p.Offline {
				st.Current = append(st.Current, p.Name)
			}
		}
	} else {
		st.Current = []string{""}
	}
	return st, nil
}

// StreamLeader waits until the stream has a leader on a running node and
// returns that node, so that a test can put it in lame-duck mode or kill
// it. A node that leads a Raft group hands the leadership over and waits a
// hard-coded second before it sends its LDM notice to clients (nats-server
// does so in lameDuckMode).
func (c *Cluster) StreamLeader(ctx context.Context, stream string) (*Node, error) {
	var lastErr error
	for {
		st, err := c.StreamState(ctx, stream)
		if err == nil {
			if n := c.NodeByName(st.Leader); n != nil && n.Running() {
				return n, nil
			}
			err = fmt.Errorf("no leader (state %+v)", st)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("natstest: stream %q leader: %w (last: %v)", stream, ctx.Err(), lastErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitStreamCurrent waits until the stream has a leader and every replica
// is online and caught up: after a node is restarted, before the next
// fault.
func (c *Cluster) WaitStreamCurrent(ctx context.Context, stream string) error {
	var last StreamState
	var lastErr error
	for {
		st, err := c.StreamState(ctx, stream)
		if err == nil && st.Leader != "" && len(st.Current) >= st.Replicas {
			return nil
		}
		last, lastErr = st, err
		select {
		case <-ctx.Done():
			return fmt.Errorf("natstest: stream %q not current: %w (last state %+v, error %v)", stream, ctx.Err(), last, lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StoredMsg is one message read back from a stream.
type StoredMsg struct {
	Seq     uint64
	Subject string
	// MsgID is the message's Nats-Msg-Id header.
	MsgID  string
	Header nats.Header
	Data   []byte
	// Time is when the stream stored it.
	Time time.Time
}

// ReadStream reads every message of the stream, in stream order, with an
// ordered consumer on nc. A cluster that has just had a node restarted can
// answer "no responders" or time out for a moment: the read starts again
// until ctx ends.
func ReadStream(ctx context.Context, nc *nats.Conn, stream string) ([]StoredMsg, error) {
	for {
		out, err := readStream(ctx, nc, stream)
		if err == nil || errors.Is(err, jetstream.ErrStreamNotFound) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("natstest: read stream %q: %w (last error: %v)", stream, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func readStream(ctx context.Context, nc *nats.Conn, stream string) ([]StoredMsg, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := lookupStream(ctx, js, stream)
	if err != nil {
		return nil, err
	}
	total := s.CachedInfo().State.Msgs
	out := make([]StoredMsg, 0, total)
	if total == 0 {
		return out, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for uint64(len(out)) < total {
		// Ask for no more than is there, and read each batch to its end,
		// so that no fetch is left waiting.
		batch, err := cons.Fetch(int(min(total-uint64(len(out)), 4096)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		var mdErr error
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				mdErr = err
				continue
			}
			out = append(out, StoredMsg{Seq: md.Sequence.Stream, Subject: m.Subject(), MsgID: m.Headers().Get(jetstream.MsgIDHeader),
				Header: m.Headers(), Data: m.Data(), Time: md.Timestamp})
		}
		if mdErr != nil {
			return nil, mdErr
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("natstest: stream %q: read %d of %d messages, then nothing more", stream, len(out), total)
		}
	}
	return out, nil
}

// StreamAudit compares what a stream holds with what a source produced.
type StreamAudit struct {
	// Expected is how many distinct updates the source produced, Stored
	// how many messages the stream holds on those subjects.
	Expected, Stored uint64
	// Lost counts produced updates missing from the stream; Duplicated
	// stored copies beyond the first of an update; OutOfOrder updates
	// stored before an update of their subject produced earlier;
	// Unexpected stored messages the source never produced.
	Lost, Duplicated, OutOfOrder, Unexpected uint64
	// Examples describes a few of the problems.
	Examples []string
}

// OK reports every update stored exactly once, in order.
func (a StreamAudit) OK() bool {
	return a.Lost == 0 && a.Duplicated == 0 && a.OutOfOrder == 0 && a.Unexpected == 0
}

// String summarises the audit on one line, for a test failure message.
func (a StreamAudit) String() string {
	return fmt.Sprintf("expected %d, stored %d: lost %d, duplicated %d, out of order %d, unexpected %d %v",
		a.Expected, a.Stored, a.Lost, a.Duplicated, a.OutOfOrder, a.Unexpected, a.Examples)
}

// Audit compares the stream's messages with the message IDs the source
// produced, by subject in production order. IDs repeated in expected (an
// update sent again with the same identity) count once.
func Audit(expected map[string][]string, stored []StoredMsg) StreamAudit {
	a := NewAuditor(expected)
	for _, m := range stored {
		a.Add(m.Subject, m.MsgID, m.Seq)
	}
	return a.Result()
}

// Auditor is Audit one stored message at a time, for a stream too large to
// hold in memory (AuditStream).
type Auditor struct {
	a        StreamAudit
	expected map[string][]string
	want     map[string]auditPos
	seen     map[string]bool
	last     map[string]int
}

type auditPos struct {
	subject string
	index   int
}

// NewAuditor returns an Auditor of the updates in expected (message IDs by
// subject, in production order).
func NewAuditor(expected map[string][]string) *Auditor {
	a := &Auditor{expected: expected, want: map[string]auditPos{}, seen: map[string]bool{}, last: map[string]int{}}
	for subj, ids := range expected {
		i := 0
		for _, id := range ids {
			if _, dup := a.want[id]; dup {
				continue
			}
			a.want[id] = auditPos{subj, i}
			i++
		}
		a.a.Expected += uint64(i)
	}
	return a
}

func (a *Auditor) example(format string, args ...any) {
	if len(a.a.Examples) < 5 {
		a.a.Examples = append(a.a.Examples, fmt.Sprintf(format, args...))
	}
}

// Add audits the next stored message, in stream order: its subject,
// message ID and stream sequence (for the examples).
func (a *Auditor) Add(subject, msgID string, seq uint64) {
	p, ok := a.want[msgID]
	if !ok {
		if _, mine := a.expected[subject]; mine {
			a.a.Stored++
			a.a.Unexpected++
			a.example("unexpected %s seq %d id %q", subject, seq, msgID)
		}
		return
	}
	a.a.Stored++
	if a.seen[msgID] {
		a.a.Duplicated++
		a.example("duplicate %s seq %d id %s", subject, seq, msgID)
		return
	}
	a.seen[msgID] = true
	if p.subject != subject {
		a.a.Unexpected++
		a.example("id %s stored on %s, produced on %s", msgID, subject, p.subject)
		return
	}
	if li, ok := a.last[subject]; ok && p.index < li {
		a.a.OutOfOrder++
		a.example("out of order %s seq %d: update %d after %d", subject, seq, p.index, li)
	} else {
		a.last[subject] = p.index
	}
}

// Result returns the audit of what was added so far: every expected
// update not added counts as lost.
func (a *Auditor) Result() StreamAudit {
	r := a.a
	r.Examples = append([]string(nil), a.a.Examples...)
	for id, p := range a.want {
		if !a.seen[id] {
			r.Lost++
			if len(r.Examples) < 5 {
				r.Examples = append(r.Examples, fmt.Sprintf("lost %s update %d id %s", p.subject, p.index, id))
			}
		}
	}
	return r
}

// AuditStream audits every message of the stream against expected as
// Audit does, reading the stream with an ordered consumer on nc without
// keeping the messages: for streams of millions. A read that fails (a
// busy cluster can drop a consumer under it) starts again from the
// first message, up to five times.
func AuditStream(ctx context.Context, nc *nats.Conn, stream string, expected map[string][]string) (StreamAudit, error) {
	var err error
	for range 5 {
		var a StreamAudit
		if a, err = auditStream(ctx, nc, stream, expected); err == nil || ctx.Err() != nil {
			return a, err
		}
	}
	return StreamAudit{}, err
}

func auditStream(ctx context.Context, nc *nats.Conn, stream string, expected map[string][]string) (StreamAudit, error) {
	a := NewAuditor(expected)
	js, err := jetstream.New(nc)
	if err != nil {
		return StreamAudit{}, err
	}
	s, err := lookupStream(ctx, js, stream)
	if err != nil {
		return StreamAudit{}, err
	}
	total := s.CachedInfo().State.Msgs
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return StreamAudit{}, fmt.Errorf("natstest: stream %q: ordered consumer: %w", stream, err)
	}
	// Messages, not Fetch: the ordered consumer's iterator makes a new
	// consumer where the old one stopped when the server drops it under
	// load (a Fetch then fails with "no responders").
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return StreamAudit{}, fmt.Errorf("natstest: stream %q: read: %w", stream, err)
	}
	defer it.Stop()
	for read := uint64(0); read < total; read++ {
		if read%4096 == 0 && ctx.Err() != nil {
			return StreamAudit{}, fmt.Errorf("natstest: stream %q: read %d of %d messages: %w", stream, read, total, ctx.Err())
		}
		m, err := it.Next(jetstream.NextMaxWait(30 * time.Second))
		if err != nil {
			return StreamAudit{}, fmt.Errorf("natstest: stream %q: read %d of %d messages, then: %w", stream, read, total, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return StreamAudit{}, err
		}
		a.Add(m.Subject(), m.Headers().Get(jetstream.MsgIDHeader), md.Sequence.Stream)
	}
	return a.Result(), nil
}

// lookupStream looks the stream up, with its info as of the lookup in
// CachedInfo. Right after a restart a node may not answer the JetStream
// API yet, and a busy cluster can answer "no responders" or time out for
// a moment: it asks again until ctx ends, and returns at once when the
// stream does not exist.
func lookupStream(ctx context.Context, js jetstream.JetStream, stream string) (jetstream.Stream, error) {
	for {
		s, err := js.Stream(ctx, stream)
		if err == nil || errors.Is(err, jetstream.ErrStreamNotFound) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("natstest: stream %q info: %w (last error: %v)", stream, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
