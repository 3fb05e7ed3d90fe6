package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Status is a fleet as its bucket shows it: what `apbridge fleet status`
// prints.
type Status struct {
	Bucket   string        `json:"bucket"`
	LeaseTTL time.Duration `json:"leaseTTL"`
	Relays   []RelayStatus `json:"relays"`
	Pairs    []PairStatus  `json:"pairs"`
	// ConfigVersion is the fleet's current config version, 0 when none
	// was written (ConfigBucket).
	ConfigVersion uint64 `json:"configVersion,omitempty"`
}

// RelayStatus is one live member.
type RelayStatus struct {
	ID string `json:"id"`
	// Since is when the member joined.
	Since time.Time `json:"since"`
	// Renewed is how long ago it last renewed its membership key.
	Renewed time.Duration `json:"renewedAgo"`
	// Applied is the relay's report of the fleet's config versions; nil
	// when it wrote none.
	Applied *AppliedVersion `json:"applied,omitempty"`
}

// PairStatus is one pair's lease.
type PairStatus struct {
	Pair string `json:"pair"`
	// Owner is the relay that holds the lease, "" when none does.
	Owner string `json:"owner,omitempty"`
	// Revision is the lease key's revision.
	Revision uint64 `json:"revision,omitempty"`
	// Renewed is how long ago the owner last renewed the lease.
	Renewed time.Duration `json:"renewedAgo,omitempty"`
	// Ranked lists the live relays in placement order: the first should
	// own the pair, the second takes over when it goes.
	Ranked []string `json:"ranked"`
}

// ReadStatus reads the fleet's bucket over nc. pairs adds the pairs a
// config names, so that unowned ones show too; leases in the bucket are
// shown whether listed or not.
func ReadStatus(ctx context.Context, nc *nats.Conn, bucket string, pairs []string) (Status, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return Status{}, err
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return Status{}, fmt.Errorf("fleet: bucket %q: %w", bucket, err)
	}
	st := Status{Bucket: bucket}
	if s, err := kv.Status(ctx); err == nil {
		st.LeaseTTL = s.TTL()
	}
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return Status{}, fmt.Errorf("fleet: bucket %q: %w", bucket, err)
	}
	now := time.Now()
	byPair := map[string]*PairStatus{}
	for _, p := range pairs {
		byPair[p] = &PairStatus{Pair: p}
	}
	var live []string
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // expired between Keys and Get
		}
		var h holding
		_ = json.Unmarshal(e.Value(), &h)
		switch {
		case strings.HasPrefix(k, relayPrefix):
			id := strings.TrimPrefix(k, relayPrefix)
			live = append(live, id)
			st.Relays = append(st.Relays, RelayStatus{ID: id, Since: h.Since, Renewed: now.Sub(e.Created())})
		case strings.HasPrefix(k, leasePrefix):
			p := strings.TrimPrefix(k, leasePrefix)
			ps := byPair[p]
			if ps == nil {
				ps = &PairStatus{Pair: p}
				byPair[p] = ps
			}
			ps.Owner, ps.Revision, ps.Renewed = h.Relay, e.Revision(), now.Sub(e.Created())
		}
	}
	sort.Slice(st.Relays, func(i, j int) bool { return st.Relays[i].ID < st.Relays[j].ID })
	for _, ps := range byPair {
		ps.Ranked = Rank(ps.Pair, live)
		st.Pairs = append(st.Pairs, *ps)
	}
	sort.Slice(st.Pairs, func(i, j int) bool { return st.Pairs[i].Pair < st.Pairs[j].Pair })
	if err := readApplied(ctx, js, &st); err != nil {
		return Status{}, err
	}
	return st, nil
}
