package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Version is reported by the bridge's micro service.
const Version = "0.1.0"

// service is the bridge's NATS micro service: status, snapshot and
// write-back. It lives on the active nats.Conn, so it is moved at every
// switch: started on the new active before it is stopped on the old one.
type service struct {
	mu      sync.Mutex
	svc     micro.Service
	nc      *nats.Conn
	stopped bool // no service is started again
	// retiring counts old services answering out their overlap. It is
	// added to only under mu while not stopped, and waited on after
	// stopped is set, so a switch racing Close cannot add to it after
	// the wait began.
	retiring sync.WaitGroup
}

func (b *Bridge) moveService() error {
	nc := b.conn.Active()
	if nc == nil {
		return errors.New("bridge: no active connection for the service")
	}
	s := b.svc
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.nc == nc {
		return nil
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        b.cfg.ServiceName,
		Version:     b.cfg.Version,
		Description: "OPC UA to NATS tag relay " + b.cfg.Instance,
		Metadata:    map[string]string{"instance": b.cfg.Instance, "prefix": b.cfg.Prefix},
	})
	if err != nil {
		return fmt.Errorf("bridge: micro service: %w", err)
	}
	add := func(name, subject string, h micro.HandlerFunc) error {
		return svc.AddEndpoint(name, h, micro.WithEndpointSubject(subject))
	}
	if err := errors.Join(
		add("status", b.cfg.Prefix+".status", b.handleStatus),
		add("snapshot", b.cfg.Prefix+".snapshot", b.handleSnapshot),
		add("write", b.cfg.Prefix+".write.>", b.handleWrite),
	); err != nil {
		svc.Stop()
		return fmt.Errorf("bridge: micro endpoints: %w", err)
	}
	// Make before break: the old service answers until the new one's
	// subscriptions are registered and have had time to reach the other
	// brokers.
	nc.FlushTimeout(2 * time.Second)
	old := s.svc
	s.svc, s.nc = svc, nc
	if old != nil {
		s.retiring.Add(1)
		go func() {
			defer s.retiring.Done()
			t := time.NewTimer(250 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-b.ctx.Done():
			}
			old.Stop()
		}()
	}
	return nil
}

// stopService stops the service for good and waits for the retiring ones.
func (b *Bridge) stopService() {
	s := b.svc
	s.mu.Lock()
	s.stopped = true
	if s.svc != nil {
		s.svc.Stop()
		s.svc = nil
	}
	s.mu.Unlock()
	s.retiring.Wait()
}

func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Status is what <prefix>.status answers.
type Status struct {
	Instance string        `json:"instance"`
	Prefix   string        `json:"prefix"`
	Started  time.Time     `json:"started"`
	NATS     NATSStatus    `json:"nats"`
	Sources  []SourceStats `json:"sources"`
	// Sink is the sink's own state, when it reports one (StatusReporter):
	// the JetStream sink's stream, readiness, counters and health.
	Sink any `json:"sink,omitempty"`
}

// NATSStatus describes the bridge's ApConnection.
type NATSStatus struct {
	Status          string            `json:"status"`
	Active          *apconn.Server    `json:"active,omitempty"`
	Passive         *apconn.Server    `json:"passive,omitempty"`
	Switches        uint64            `json:"switches"`
	SwitchesByCause map[string]uint64 `json:"switchesByCause,omitempty"`
	LastSwitch      *SwitchInfo       `json:"lastSwitch,omitempty"`
}

// SwitchInfo describes a switch of the ApConnection.
type SwitchInfo struct {
	At         time.Time `json:"at"`
	Cause      string    `json:"cause"`
	From       string    `json:"from"`
	To         string    `json:"to"`
	DurationMs float64   `json:"durationMs"`
}

// Status returns the bridge's state: the connection, every source's health
// and its tags by quality.
func (b *Bridge) Status() Status {
	st := Status{Instance: b.cfg.Instance, Prefix: b.cfg.Prefix, Started: b.startAt, Sources: b.Stats()}
	cs := b.conn.Stats()
	st.NATS = NATSStatus{Status: b.conn.Status().String(), Switches: cs.Switches, SwitchesByCause: cs.SwitchesByCause}
	if a, ok := b.conn.ActiveServer(); ok {
		st.NATS.Active = &a
	}
	if p, ok := b.conn.PassiveServer(); ok {
		st.NATS.Passive = &p
	}
	if sr, ok := b.sink.(StatusReporter); ok {
		st.Sink = sr.SinkStatus()
	}
	if e := b.lastSw.Load(); e != nil {
		st.NATS.LastSwitch = &SwitchInfo{At: e.At, Cause: e.Cause.String(), From: e.From.Name, To: e.To.Name,
			DurationMs: float64(e.Duration.Microseconds()) / 1000}
	}
	return st
}

func (b *Bridge) handleStatus(req micro.Request) {
	data, err := marshalJSON(b.Status())
	if err != nil {
		req.Error("500", err.Error(), nil)
		return
	}
	req.Respond(data)
}

// SnapshotRequest is the optional body of a snapshot request.
type SnapshotRequest struct {
	// Source limits the snapshot to one source.
	Source string `json:"source,omitempty"`
	// Prefix limits it to tags whose subject starts with this.
	Prefix string `json:"prefix,omitempty"`
	// After continues a paged snapshot: the Next of the previous reply.
	After string `json:"after,omitempty"`
	// Limit caps the updates in the reply (default and maximum: the
	// bridge's SnapshotPage).
	Limit int `json:"limit,omitempty"`
}

// SnapshotReply is the answer: the last update of every tag (in subject
// order) that has one, and Next when more pages follow.
type SnapshotReply struct {
	Updates []json.RawMessage `json:"updates"`
	Next    string            `json:"next,omitempty"`
}

// Snapshot returns one page of the last values.
func (b *Bridge) Snapshot(r SnapshotRequest) SnapshotReply {
	limit := b.cfg.SnapshotPage
	if r.Limit > 0 && r.Limit < limit {
		limit = r.Limit
	}
	type item struct {
		subject string
		u       Update
	}
	var items []item
	b.mu.Lock()
	sources := append([]*runner(nil), b.sources...)
	b.mu.Unlock()
	for _, rn := range sources {
		if r.Source != "" && rn.src.Name() != r.Source {
			continue
		}
		rn.mu.Lock()
		for _, ts := range rn.tags {
			if !ts.have || !strings.HasPrefix(ts.subject, r.Prefix) || ts.subject <= r.After {
				continue
			}
			items = append(items, item{ts.subject, ts.last})
		}
		rn.mu.Unlock()
	}
	sort.Slice(items, func(i, j int) bool { return items[i].subject < items[j].subject })
	out := SnapshotReply{Updates: []json.RawMessage{}}
	for i, it := range items {
		if i == limit {
			out.Next = items[i-1].subject
			break
		}
		data, err := AppendJSON(nil, &it.u)
		if err != nil {
			continue
		}
		out.Updates = append(out.Updates, data)
	}
	return out
}

func (b *Bridge) handleSnapshot(req micro.Request) {
	var r SnapshotRequest
	if d := bytes.TrimSpace(req.Data()); len(d) > 0 {
		if err := json.Unmarshal(d, &r); err != nil {
			req.Error("400", "snapshot request: "+err.Error(), nil)
			return
		}
	}
	data, err := marshalJSON(b.Snapshot(r))
	if err != nil {
		req.Error("500", err.Error(), nil)
		return
	}
	req.Respond(data)
}

// WriteRequest is the body of a write-back request. A body that is not a
// JSON object is taken as the value itself.
type WriteRequest struct {
	Value json.RawMessage `json:"value"`
	// Type is the value's type; by default the type of the tag's last
	// value.
	Type Type `json:"type,omitempty"`
}

// WriteReply answers a write-back request.
type WriteReply struct {
	OK      bool   `json:"ok"`
	Tag     string `json:"tag,omitempty"`
	Status  string `json:"status,omitempty"`
	Quality string `json:"quality,omitempty"`
	Error   string `json:"error,omitempty"`
}

// writeError is a failed write with the micro error code to answer.
type writeError struct {
	code string
	err  error
}

func (e *writeError) Error() string { return e.err.Error() }

func (b *Bridge) handleWrite(req micro.Request) {
	subject := strings.TrimPrefix(req.Subject(), b.cfg.Prefix+".write.")
	rep, werr := b.write(subject, req.Data())
	data, _ := marshalJSON(rep)
	if werr != nil {
		req.Error(werr.code, werr.err.Error(), data)
		return
	}
	req.Respond(data)
}

// Write writes data (a WriteRequest, or a bare JSON value) to the tag
// published on subject, as a write-back request would.
func (b *Bridge) Write(subject string, data []byte) (WriteReply, error) {
	rep, err := b.write(subject, data)
	if err != nil {
		return rep, err
	}
	return rep, nil
}

func (b *Bridge) write(subject string, data []byte) (WriteReply, *writeError) {
	fail := func(code string, tag string, err error) (WriteReply, *writeError) {
		return WriteReply{OK: false, Tag: tag, Error: err.Error()}, &writeError{code: code, err: err}
	}
	b.mu.Lock()
	ts := b.bySubject[subject]
	b.mu.Unlock()
	if ts == nil {
		return fail("404", "", fmt.Errorf("no tag is published on %q", subject))
	}
	r := ts.src
	r.counters.writes.Add(1)
	if !ts.cfg.Writable {
		r.counters.writeErrors.Add(1)
		return fail("403", ts.cfg.Name, fmt.Errorf("tag %q: %w (set writable: true in its configuration)", ts.cfg.Name, ErrReadOnly))
	}
	var wr WriteRequest
	d := bytes.TrimSpace(data)
	if len(d) > 0 && d[0] == '{' {
		if err := json.Unmarshal(d, &wr); err != nil {
			r.counters.writeErrors.Add(1)
			return fail("400", ts.cfg.Name, fmt.Errorf("tag %q: malformed write request: %v", ts.cfg.Name, err))
		}
		if len(wr.Value) == 0 {
			r.counters.writeErrors.Add(1)
			return fail("400", ts.cfg.Name, fmt.Errorf(`tag %q: malformed write request: no "value"`, ts.cfg.Name))
		}
	} else {
		wr.Value = d
	}
	if !json.Valid(wr.Value) {
		r.counters.writeErrors.Add(1)
		return fail("400", ts.cfg.Name, fmt.Errorf("tag %q: malformed write request: %q is not JSON", ts.cfg.Name, wr.Value))
	}
	typ := wr.Type
	if typ == "" {
		r.mu.Lock()
		if ts.have {
			typ, _ = TypeOf(ts.last.Value)
		}
		r.mu.Unlock()
	}
	if typ == "" || typ == TypeNull {
		r.counters.writeErrors.Add(1)
		return fail("400", ts.cfg.Name, fmt.Errorf(`tag %q: its type is not known yet: give "type" in the request`, ts.cfg.Name))
	}
	v, err := DecodeValue(typ, wr.Value)
	if err != nil {
		r.counters.writeErrors.Add(1)
		return fail("400", ts.cfg.Name, fmt.Errorf("tag %q: %v", ts.cfg.Name, err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.WriteTimeout)
	defer cancel()
	code, err := r.src.Write(ctx, Tag{Name: ts.cfg.Name, Address: ts.cfg.Address, Handle: ts.handle}, v)
	if err != nil {
		r.counters.writeErrors.Add(1)
		c := "502"
		if errors.Is(err, ErrNotWritableNow) {
			c = "503"
		}
		rep, werr := fail(c, ts.cfg.Name, fmt.Errorf("tag %q: %w", ts.cfg.Name, err))
		if code != 0 {
			rep.Status, rep.Quality = code.String(), code.Quality().String()
		}
		return rep, werr
	}
	rep := WriteReply{OK: code.Quality() == QualityGood, Tag: ts.cfg.Name, Status: code.String(), Quality: code.Quality().String()}
	if !rep.OK {
		r.counters.writeErrors.Add(1)
		rep.Error = fmt.Sprintf("tag %q: the source answered %s", ts.cfg.Name, code)
		return rep, &writeError{code: "502", err: errors.New(rep.Error)}
	}
	b.log.Info().Str("source", r.src.Name()).Str("tag", ts.cfg.Name).Str("status", code.String()).Msg("write-back")
	return rep, nil
}
