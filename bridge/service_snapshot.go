package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go/micro"
)

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
		if err := decodeRequest(d, &r); err != nil {
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
