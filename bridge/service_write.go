package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// writeError is a failed write with the micro error code to answer.
type writeError struct {
	code string
	err  error
}

func (e *writeError) Error() string { return e.err.Error() }

func (b *Bridge) handleWrite(req micro.Request) {
	subject := strings.TrimPrefix(req.Subject(), wire.WriteSubject(b.cfg.Prefix, ""))
	who := requesterOf(nats.Header(req.Headers()), b.cfg.TrustRequestInfo)
	if b.cfg.TrustRequestInfo && who.identity == identityNone {
		// Through an import the server always writes the header: this
		// request came another way, and the setting is not true.
		b.log.Warn().Str("subject", req.Subject()).
			Msg("write request without Nats-Request-Info although the service trusts it: the write subjects are reachable without the service import (see docs/security.md)")
	}
	rep, werr := b.write(subject, req.Data(), who)
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

// Write writes data (a wire.WriteRequest, or a bare JSON value) to the tag
// published on subject, as a write-back request would. The log names no
// user: the caller is the program itself.
func (b *Bridge) Write(subject string, data []byte) (wire.WriteReply, error) {
	rep, err := b.write(subject, data, requester{identity: identityNone})
	if err != nil {
		return rep, err
	}
	return rep, nil
}

// write writes; who asked is for the log.
func (b *Bridge) write(subject string, data []byte, who requester) (wire.WriteReply, *writeError) {
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
	r.mu.Lock()
	var known wire.Type
	if ts.have {
		known, _ = wire.TypeOf(ts.last.Value)
	}
	r.mu.Unlock()
	_, raw, v, err := decodeWrite(data, known)
	if err != nil {
		r.counters.writeErrors.Add(1)
		return fail("400", ts.cfg.Name, fmt.Errorf("tag %q: %w", ts.cfg.Name, err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.WriteTimeout)
	defer cancel()
	code, err := r.src.Write(ctx, Tag{Name: ts.cfg.Name, Address: ts.cfg.Address, Handle: ts.handle}, v)
	// The value is logged at debug level only: it may be a recipe or a
	// setpoint an operator would not want in a central log.
	who.logTo(b.log.Debug().Str("source", r.src.Name()).Str("tag", ts.cfg.Name)).RawJSON("value", raw).Msg("write-back value")
	if err != nil {
		who.logTo(b.log.Warn().Str("source", r.src.Name()).Str("tag", ts.cfg.Name)).Str("status", code.String()).Err(err).Msg("write-back failed")
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
		who.logTo(b.log.Warn().Str("source", r.src.Name()).Str("tag", ts.cfg.Name)).Str("status", code.String()).Msg("write-back refused by the server")
		return rep, &writeError{code: "502", err: errors.New(rep.Error)}
	}
	who.logTo(b.log.Info().Str("source", r.src.Name()).Str("tag", ts.cfg.Name)).Str("status", code.String()).Msg("write-back")
	return rep, nil
}

// decodeWrite reads the body of a write request, a JSON object
// {"value": ..., "type": ...} or a bare JSON value, for a tag whose last
// value has the type known ("" or Null when it has none yet). It returns
// the value's type, and the value as JSON and in the Go type of that type.
// An error is a 400; it never repeats the value, which may be a secret.
func decodeWrite(data []byte, known wire.Type) (wire.Type, json.RawMessage, any, error) {
	var wr wire.WriteRequest
	d := bytes.TrimSpace(data)
	if len(d) > 0 && d[0] == '{' {
		if err := decodeRequest(d, &wr); err != nil {
			return "", nil, nil, fmt.Errorf("malformed write request: %v", err)
		}
		if len(wr.Value) == 0 {
			return "", nil, nil, errors.New(`malformed write request: no "value"`)
		}
	} else {
		wr.Value = d
	}
	if !json.Valid(wr.Value) {
		return "", nil, nil, fmt.Errorf(`malformed write request: the value (%d bytes) is not JSON; send a JSON value or {"value": ..., "type": ...}`, len(wr.Value))
	}
	if known == wire.TypeNull {
		known = ""
	}
	typ := wr.Type
	switch {
	case typ == "":
		typ = known
	case known != "" && typ != known:
		// The server would refuse it (BadTypeMismatch), or worse, a
		// lenient one convert it: the relay knows better and says so.
		return "", nil, nil, fmt.Errorf(`"type" %q contradicts the tag's type %s (the type of its last value): leave "type" out, or give %s`,
			truncate(string(typ), maxKeyInError), known, known)
	}
	if typ == "" || typ == wire.TypeNull {
		return "", nil, nil, errors.New(`its type is not known yet: give "type" in the request`)
	}
	v, err := wire.DecodeValue(typ, wr.Value)
	if err != nil {
		return "", nil, nil, err
	}
	return typ, wr.Value, v, nil
}
