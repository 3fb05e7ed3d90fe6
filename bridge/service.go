package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
		Metadata:    b.serviceMetadata(),
	})
	if err != nil {
		return fmt.Errorf("bridge: micro service: %w", err)
	}
	add := func(name, subject string, h micro.HandlerFunc) error {
		return svc.AddEndpoint(name, h, micro.WithEndpointSubject(subject))
	}
	errs := []error{
		add("status", wire.StatusSubject(b.cfg.Prefix), b.handleStatus),
		add("snapshot", wire.SnapshotSubject(b.cfg.Prefix), b.handleSnapshot),
		add("write", wire.WriteSubject(b.cfg.Prefix, ">"), b.handleWrite),
	}
	for _, e := range b.endpoints {
		opts := []micro.EndpointOpt{micro.WithEndpointSubject(e.Subject)}
		if e.Everyone {
			opts = append(opts, micro.WithEndpointQueueGroupDisabled())
		}
		errs = append(errs, svc.AddEndpoint(e.Name, e.Handler, opts...))
	}
	if err := errors.Join(errs...); err != nil {
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

// serviceMetadata is Config.Metadata with the bridge's own keys.
func (b *Bridge) serviceMetadata() map[string]string {
	md := make(map[string]string, len(b.cfg.Metadata)+2)
	for k, v := range b.cfg.Metadata {
		md[k] = v
	}
	md["instance"], md["prefix"] = b.cfg.Instance, b.cfg.Prefix
	return md
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

func (b *Bridge) replyError(req micro.Request, code string, err error) {
	data, _ := marshalJSON(wire.ErrorReply{Error: err.Error(), Code: code})
	if rerr := req.Error(code, oneLine(err.Error()), data); rerr != nil {
		b.log.Warn().Err(rerr).Str("endpoint", endpointOf(req.Subject(), b.cfg.Prefix)).Msg("error reply not sent")
	}
}

// oneLine keeps an error description fit for a header.
func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

func endpointOf(subject, prefix string) string {
	rest := strings.TrimPrefix(subject, prefix+".")
	name, _, _ := strings.Cut(rest, ".")
	return name
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
