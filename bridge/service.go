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
	"github.com/apbridge/apbridge/wire"
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
		add("status", wire.StatusSubject(b.cfg.Prefix), b.handleStatus),
		add("snapshot", wire.SnapshotSubject(b.cfg.Prefix), b.handleSnapshot),
		add("write", wire.WriteSubject(b.cfg.Prefix, ">"), b.handleWrite),
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
		b.replyError(req, "500", err)
		return
	}
	if err := req.Respond(data); err != nil {
		b.log.Warn().Err(err).Str("endpoint", "status").Int("bytes", len(data)).Msg("reply not sent")
	}
}

// Snapshot returns one page of the last values.
func (b *Bridge) Snapshot(r wire.SnapshotRequest) wire.SnapshotReply {
	limit := b.cfg.SnapshotPage
	if r.Limit > 0 && r.Limit < limit {
		limit = r.Limit
	}
	type item struct {
		subject string
		u       wire.Update
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
	out := wire.SnapshotReply{Updates: []json.RawMessage{}}
	for i, it := range items {
		if i == limit {
			out.Next = items[i-1].subject
			break
		}
		data, err := wire.AppendJSON(nil, &it.u)
		if err != nil {
			continue
		}
		out.Updates = append(out.Updates, data)
	}
	return out
}

func (b *Bridge) handleSnapshot(req micro.Request) {
	var r wire.SnapshotRequest
	if d := bytes.TrimSpace(req.Data()); len(d) > 0 {
		if err := decodeStrict(d, &r); err != nil {
			b.replyError(req, "400", fmt.Errorf("snapshot request: %v", err))
			return
		}
	}
	if code, err := b.checkSnapshot(r); err != nil {
		b.replyError(req, code, fmt.Errorf("snapshot request: %w", err))
		return
	}
	data, err := marshalJSON(b.Snapshot(r))
	if err != nil {
		b.replyError(req, "500", err)
		return
	}
	if err := req.Respond(data); err != nil {
		b.log.Warn().Err(err).Str("endpoint", "snapshot").Int("bytes", len(data)).Msg("reply not sent")
	}
}

// checkSnapshot refuses what would otherwise be an empty answer that looks
// like a right one: a negative limit, a source the bridge does not have.
func (b *Bridge) checkSnapshot(r wire.SnapshotRequest) (string, error) {
	if r.Limit < 0 {
		return "400", fmt.Errorf("limit: %d is out of range (valid 0-%d; 0 means %d)", r.Limit, b.cfg.SnapshotPage, b.cfg.SnapshotPage)
	}
	if r.Source == "" {
		return "", nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	for _, rn := range b.sources {
		if rn.src.Name() == r.Source {
			return "", nil
		}
		names = append(names, rn.src.Name())
	}
	return "404", fmt.Errorf("source: %q is not a source of this relay (valid: %s)", r.Source, strings.Join(names, ", "))
}

func (b *Bridge) replyError(req micro.Request, code string, err error) {
	data, _ := marshalJSON(wire.ErrorReply{Error: err.Error(), Code: code})
	if rerr := req.Error(code, oneLine(err.Error()), data); rerr != nil {
		b.log.Warn().Err(rerr).Str("endpoint", endpointOf(req.Subject(), b.cfg.Prefix)).Msg("error reply not sent")
	}
}

// decodeStrict decodes one JSON object into v: unknown fields and
// trailing data are errors, not ignored.
func decodeStrict(d []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(d))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}

// oneLine keeps an error description fit for a header.
func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

func endpointOf(subject, prefix string) string {
	rest := strings.TrimPrefix(subject, prefix+".")
	name, _, _ := strings.Cut(rest, ".")
	return name
}

// writeError is a failed write with the micro error code to answer.
type writeError struct {
	code string
	err  error
}

func (e *writeError) Error() string { return e.err.Error() }

func (b *Bridge) handleWrite(req micro.Request) {
	subject := strings.TrimPrefix(req.Subject(), wire.WriteSubject(b.cfg.Prefix, ""))
	rep, werr := b.write(subject, req.Data(), requestUser(req.Headers()))
	data, _ := marshalJSON(rep)
	var err error
	if werr != nil {
		err = req.Error(werr.code, oneLine(werr.err.Error()), data)
	} else {
		err = req.Respond(data)
	}
	if err != nil {
		b.log.Warn().Err(err).Str("endpoint", "write").Str("tag", rep.Tag).Msg("reply not sent")
	}
}

// requestUser is who sent a request, as the NATS server tells it in the
// Nats-Request-Info header (on requests that cross accounts through a
// service import); "" when it does not.
func requestUser(h micro.Headers) string {
	info := nats.Header(h).Get("Nats-Request-Info")
	if info == "" {
		return ""
	}
	var ci struct {
		Account string `json:"acc"`
		User    string `json:"user"`
		Name    string `json:"name"`
	}
	if json.Unmarshal([]byte(info), &ci) != nil {
		return ""
	}
	who := ci.User
	if who == "" {
		who = ci.Name
	}
	if ci.Account != "" {
		who = ci.Account + "/" + who
	}
	return who
}

// Write writes data (a wire.WriteRequest, or a bare JSON value) to the tag
// published on subject, as a write-back request would.
func (b *Bridge) Write(subject string, data []byte) (wire.WriteReply, error) {
	rep, err := b.write(subject, data, "")
	if err != nil {
		return rep, err
	}
	return rep, nil
}

// write writes; user is who asked, for the log ("" when unknown).
func (b *Bridge) write(subject string, data []byte, user string) (wire.WriteReply, *writeError) {
	fail := func(code string, tag string, err error) (wire.WriteReply, *writeError) {
		return wire.WriteReply{OK: false, Tag: tag, Error: err.Error()}, &writeError{code: code, err: err}
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
	var wr wire.WriteRequest
	d := bytes.TrimSpace(data)
	if len(d) > 0 && d[0] == '{' {
		if err := decodeStrict(d, &wr); err != nil {
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
		return fail("400", ts.cfg.Name, fmt.Errorf(`tag %q: malformed write request: the value (%d bytes) is not JSON; send a JSON value or {"value": ..., "type": ...}`, ts.cfg.Name, len(wr.Value)))
	}
	typ := wr.Type
	if typ == "" {
		r.mu.Lock()
		if ts.have {
			typ, _ = wire.TypeOf(ts.last.Value)
		}
		r.mu.Unlock()
	}
	if typ == "" || typ == wire.TypeNull {
		r.counters.writeErrors.Add(1)
		return fail("400", ts.cfg.Name, fmt.Errorf(`tag %q: its type is not known yet: give "type" in the request`, ts.cfg.Name))
	}
	v, err := wire.DecodeValue(typ, wr.Value)
	if err != nil {
		r.counters.writeErrors.Add(1)
		return fail("400", ts.cfg.Name, fmt.Errorf("tag %q: %v", ts.cfg.Name, err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.WriteTimeout)
	defer cancel()
	code, err := r.src.Write(ctx, Tag{Name: ts.cfg.Name, Address: ts.cfg.Address, Handle: ts.handle}, v)
	if user == "" {
		user = "unknown"
	}
	// The value is logged at debug level only: it may be a recipe or a
	// setpoint an operator would not want in a central log.
	b.log.Debug().Str("source", r.src.Name()).Str("tag", ts.cfg.Name).Str("user", user).RawJSON("value", wr.Value).Msg("write-back value")
	if err != nil {
		b.log.Warn().Str("source", r.src.Name()).Str("tag", ts.cfg.Name).Str("user", user).Str("status", code.String()).Err(err).Msg("write-back failed")
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
	rep := wire.WriteReply{OK: code.Quality() == wire.QualityGood, Tag: ts.cfg.Name, Status: code.String(), Quality: code.Quality().String()}
	if !rep.OK {
		r.counters.writeErrors.Add(1)
		rep.Error = fmt.Sprintf("tag %q: the source answered %s", ts.cfg.Name, code)
		b.log.Warn().Str("source", r.src.Name()).Str("tag", ts.cfg.Name).Str("user", user).Str("status", code.String()).Msg("write-back refused by the server")
		return rep, &writeError{code: "502", err: errors.New(rep.Error)}
	}
	b.log.Info().Str("source", r.src.Name()).Str("tag", ts.cfg.Name).Str("user", user).Str("status", code.String()).Msg("write-back")
	return rep, nil
}

// ValidateServiceName checks a micro service name: 1-64 letters, digits,
// '-' and '_', which is what the NATS micro protocol accepts.
func ValidateServiceName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("service name %q: want 1-64 characters", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("service name %q: %q is not allowed (valid: letters, digits, - and _)", name, c)
		}
	}
	return nil
}
