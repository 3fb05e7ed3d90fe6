package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go/micro"
)

// Snapshot returns one page of the last values. It takes r as it is: a
// limit out of range means the page size, and an unknown cursor or a
// prefix no subject has gives an empty page. The snapshot endpoint refuses
// such requests first (docs/payload.md), since an empty page reads as "no
// tags".
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
	r, err := decodeSnapshotRequest(req.Data())
	if err != nil {
		b.replyError(req, "400", fmt.Errorf("snapshot request: %v", err))
		return
	}
	if code, err := checkSnapshotRequest(r, b.snapshotScope()); err != nil {
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

// decodeSnapshotRequest reads the body of a snapshot request: nothing, or
// one JSON object of wire.SnapshotRequest's fields.
func decodeSnapshotRequest(data []byte) (wire.SnapshotRequest, error) {
	var r wire.SnapshotRequest
	if d := bytes.TrimSpace(data); len(d) > 0 {
		if err := decodeRequest(d, &r); err != nil {
			return wire.SnapshotRequest{}, err
		}
	}
	return r, nil
}

// snapshotScope is what checking a snapshot request needs of the bridge.
type snapshotScope struct {
	// page is the page size, the largest limit.
	page int
	// sources are the names of the bridge's sources.
	sources []string
	// sourceOf returns the source of the tag published on subject.
	sourceOf func(subject string) (string, bool)
}

func (b *Bridge) snapshotScope() snapshotScope {
	b.mu.Lock()
	names := make([]string, len(b.sources))
	for i, rn := range b.sources {
		names[i] = rn.src.Name()
	}
	b.mu.Unlock()
	return snapshotScope{
		page:    b.cfg.SnapshotPage,
		sources: names,
		sourceOf: func(subject string) (string, bool) {
			b.mu.Lock()
			defer b.mu.Unlock()
			ts := b.bySubject[subject]
			if ts == nil {
				return "", false
			}
			return ts.src.src.Name(), true
		},
	}
}

// checkSnapshotRequest refuses what Snapshot would answer with a page
// that looks right but answers another question, with the micro error
// code: a limit out of range (it was capped quietly), a prefix with a
// wildcard or a character no subject has, a source the bridge does not
// have (404), and a cursor that is not a tag's subject, or not one the
// request's source and prefix select (an empty page read as "no tags").
// The client's strings are cut in the errors, so that an error for any
// request fits in a reply.
func checkSnapshotRequest(r wire.SnapshotRequest, sc snapshotScope) (string, error) {
	if r.Limit < 0 || r.Limit > sc.page {
		return "400", fmt.Errorf("limit: %d is out of range (valid 0-%d; 0 means %d)", r.Limit, sc.page, sc.page)
	}
	if err := checkSnapshotPrefix(r.Prefix); err != nil {
		return "400", err
	}
	if r.Source != "" && !slices.Contains(sc.sources, r.Source) {
		return "404", fmt.Errorf("source: %q is not a source of this relay (valid: %s)", truncate(r.Source, maxKeyInError), strings.Join(sc.sources, ", "))
	}
	if r.After == "" {
		return "", nil
	}
	after := truncate(r.After, maxKeyInError)
	src, ok := sc.sourceOf(r.After)
	switch {
	case !ok:
		return "400", fmt.Errorf(`after: %q is not the subject of a tag of this relay: give the "next" of the previous reply, or leave "after" out for the first page`, after)
	case r.Source != "" && src != r.Source:
		return "400", fmt.Errorf(`after: %q is a tag of source %q, not of %q: give the "next" of the previous reply`, after, src, r.Source)
	case !strings.HasPrefix(r.After, r.Prefix):
		return "400", fmt.Errorf(`after: %q does not start with the prefix %q: give the "next" of the previous reply`, after, truncate(r.Prefix, maxKeyInError))
	}
	return "", nil
}

// checkSnapshotPrefix refuses a prefix that no tag subject can start with,
// and a wildcard: a prefix is matched literally, so a wildcard is a
// pattern the client meant and the relay would not apply. No tag subject
// has a wildcard token, and the subject template escapes '*' and '>' in
// names; only a tag's own subject may hold one inside a token, and a
// shorter prefix still selects it.
func checkSnapshotPrefix(p string) error {
	q := truncate(p, maxKeyInError)
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '*' || c == '>':
			return fmt.Errorf("prefix: %q has the wildcard %q at byte %d: a prefix is matched literally against the start of tag subjects, not as a pattern; give the subjects' common start (plant.line1.), or no prefix", q, c, i)
		case c <= ' ' || c == 0x7f:
			return fmt.Errorf("prefix: %q has whitespace or a control character at byte %d, which no subject has", q, i)
		}
	}
	if strings.HasPrefix(p, ".") || strings.Contains(p, "..") {
		return fmt.Errorf("prefix: %q has an empty token, which no subject has", q)
	}
	return nil
}
