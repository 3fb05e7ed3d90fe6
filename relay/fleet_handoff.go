package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// A fleet's handoffs (fleet.handoff: true). The owner of an OPC UA pair
// records what a successor needs to take the pair's data subscription over
// (uaclient.Handoff, as stateDir keeps it for a single relay) in the
// fleet's handoff bucket, HandoffBucket(bucket), under the pair's name.
// The relay that wins the pair's lease next reads it and starts the
// source with the takeover (uaclient.WithTakeover): the subscription is
// transferred to its session and what the server held is asked for again.
//
// The bucket is not the lease bucket: that one's TTL (the lease TTL)
// would expire a record a TTL after its last write, which for a source
// whose acknowledgements stand still is before (or just as) the dead
// owner's lease expires and the successor looks for it. Nor the config
// bucket: it keeps VersionHistory entries a key and every relay watches
// it for config versions, while a record changes up to four times a
// second. The handoff bucket keeps one entry a key, without a TTL.
//
// A record is written only while the writer holds a valid lease for the
// pair, and carries the lease's token (its epoch: later owners have larger
// tokens). Each write is conditional on the revision the writer read or
// wrote last, so a write in between (another owner's) makes it read the
// record again: a record of a larger token means the writer was deposed,
// and it writes that pair no more until it wins the lease again. A
// successor takes a record over only if its token is older than its own
// lease's. A gateway (mx) source's handoff is kept in the same record, by
// the same rules (fleet_handoff_mx.go).

// handoffVersion is the version of the record this relay writes and reads.
const handoffVersion = 1

// HandoffBucket is the KV bucket where a fleet whose lease bucket is
// bucket (default fleet.DefaultBucket) keeps its pairs' handoffs.
func HandoffBucket(bucket string) string {
	if bucket == "" {
		bucket = fleet.DefaultBucket
	}
	return bucket + "_handoff"
}

// handoffRecord is a pair's handoff in the handoff bucket.
type handoffRecord struct {
	Version int    `json:"version"`
	Source  string `json:"source"`
	// Relay and Token are the writer and its lease's fencing token.
	Relay string `json:"relay"`
	Token uint64 `json:"token"`
	// Serving is the endpoint whose handoff was recorded last.
	Serving   string                      `json:"serving"`
	Endpoints map[string]uaclient.Handoff `json:"endpoints"`
	// Mx is a gateway source's handoff (fleet_handoff_mx.go), with a
	// version of its own; nil for an OPC UA source.
	Mx *mxsource.Handoff `json:"mx,omitempty"`
}

// handoffEntry is the latest record of a pair and what the writer knows
// of the bucket.
type handoffEntry struct {
	rec     handoffRecord
	dirty   bool
	rev     uint64 // the key's revision read or written last; 0: read it first
	deposed bool   // a newer owner's record is there: write no more
}

// take returns a copy of the entry's record to write, over the revision
// it returns, and marks the entry written; hs.mu is held.
func (e *handoffEntry) take() (handoffRecord, uint64) {
	e.dirty = false
	rec := e.rec
	rec.Endpoints = maps.Clone(e.rec.Endpoints)
	return rec, e.rev
}

// handoffStore writes the pairs' records. Its recorders never block.
type handoffStore struct {
	kv    jetstream.KeyValue
	relay string
	// valid is the fleet's lease check (fleetPart.valid).
	valid func(pair string) (uint64, bool)
	log   zerolog.Logger
	// timeout bounds each read and write of the bucket.
	timeout time.Duration

	// wmu orders the writes: a final record (finish) is written after
	// any write in flight.
	wmu sync.Mutex

	mu      sync.Mutex
	entries map[string]*handoffEntry
	wake    chan struct{}
	// now cuts the writer's pause between writes: a record that names
	// something else to take over is written at once (see update).
	now chan struct{}
	// interval is the writer's pause between writes (stateWriteInterval).
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}
	started  bool
	closed   bool
}

// openHandoffStore opens (creating it when absent) the handoff bucket of
// the fleet whose lease bucket is bucket.
func openHandoffStore(ctx context.Context, js jetstream.JetStream, c *FleetConfig,
	valid func(string) (uint64, bool), log zerolog.Logger) (*handoffStore, error) {
	bucket, replicas, timeout := c.Bucket, c.Replicas, c.LeaseTTL
	if bucket == "" {
		bucket = fleet.DefaultBucket
	}
	if replicas == 0 {
		replicas = fleet.DefaultReplicas
	}
	if timeout == 0 {
		timeout = fleet.DefaultLeaseTTL
	}
	name := HandoffBucket(bucket)
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name,
			Description: "apbridge fleet handoffs: what a pair's next owner needs to take its subscription over",
			History:     1, Replicas: replicas, Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: handoff bucket %q: %w", name, err)
	}
	return &handoffStore{kv: kv, relay: c.RelayID, valid: valid, log: log, timeout: timeout,
		entries: map[string]*handoffEntry{}, wake: make(chan struct{}, 1), now: make(chan struct{}, 1), interval: stateWriteInterval,
		stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// recorder returns the handoff recorder of pair's instance that runs
// under the lease of token.
func (hs *handoffStore) recorder(pair string, token uint64) func(uaclient.Handoff) {
	return func(h uaclient.Handoff) {
		hs.update(pair, token, func(rec *handoffRecord) {
			rec.Endpoints[h.Endpoint] = h
			rec.Serving = h.Endpoint
		})
	}
}

// names is what a successor would take over from rec: the serving
// endpoint's data subscription, or the gateway session.
func (rec *handoffRecord) names() string {
	if rec.Mx != nil {
		return "mx " + rec.Mx.Session.ID
	}
	h, ok := rec.Endpoints[rec.Serving]
	if !ok {
		return ""
	}
	return rec.Serving + " " + strconv.FormatUint(uint64(h.DataSub), 10)
}

// update changes, with set, the record of pair's instance that runs under
// the lease of token, and wakes the writer. Not for an instance of an
// older lease, still closing. A record that names something else to
// take over than before (the Pair switched servers or read the new
// subscription's snapshot; the gateway source made another session the
// active one) is written at once, not after the writer's pause: until it
// is, a successor falls back, or takes over what it must not.
func (hs *handoffStore) update(pair string, token uint64, set func(*handoffRecord)) {
	hs.mu.Lock()
	e := hs.entries[pair]
	switch {
	case e != nil && e.rec.Token > token:
		hs.mu.Unlock()
		return
	case e == nil || e.rec.Token < token:
		e = &handoffEntry{rec: handoffRecord{Version: handoffVersion, Source: pair, Relay: hs.relay, Token: token,
			Endpoints: map[string]uaclient.Handoff{}}}
		hs.entries[pair] = e
	}
	before := e.rec.names()
	set(&e.rec)
	moved := e.rec.names() != before
	e.dirty = true
	if !hs.started && !hs.closed {
		hs.started = true
		go hs.run()
	}
	hs.mu.Unlock()
	hs.kick()
	if moved {
		select {
		case hs.now <- struct{}{}:
		default:
		}
	}
}

func (hs *handoffStore) run() {
	defer close(hs.done)
	for {
		select {
		case <-hs.stop:
			return
		case <-hs.wake:
		}
		hs.flush()
		t := time.NewTimer(hs.interval)
		select {
		case <-hs.stop:
			t.Stop()
			return
		case <-t.C:
		case <-hs.now:
			t.Stop()
		}
	}
}

// flush writes every pair whose record changed, while its lease is valid.
func (hs *handoffStore) flush() {
	type job struct {
		pair string
		rec  handoffRecord
		rev  uint64
	}
	var jobs []job
	retry := false
	hs.wmu.Lock()
	defer hs.wmu.Unlock()
	hs.mu.Lock()
	for pair, e := range hs.entries {
		if !e.dirty || e.deposed {
			continue
		}
		tok, ok := hs.valid(pair)
		switch {
		case !ok:
			// Renewals late, or lost: written when valid again; a
			// lost lease's instance records no more.
			retry = true
			continue
		case tok != e.rec.Token:
			e.dirty = false // a newer lease's instance writes its own
			continue
		}
		rec, rev := e.take()
		jobs = append(jobs, job{pair, rec, rev})
	}
	hs.mu.Unlock()
	for _, j := range jobs {
		if hs.writeEntry(context.Background(), j.pair, j.rec, j.rev) != nil {
			retry = true
		}
	}
	if retry {
		hs.kick()
	}
}

func (hs *handoffStore) kick() {
	select {
	case hs.wake <- struct{}{}:
	default:
	}
}

// writeEntry writes rec, pair's record as it was taken from its entry at
// revision rev, and notes the outcome in the entry: the new revision, a
// newer owner's record found (deposed), or a failure (dirty again, for
// the next flush). Called with wmu held.
func (hs *handoffStore) writeEntry(ctx context.Context, pair string, rec handoffRecord, rev uint64) error {
	rev, deposed, err := hs.write(ctx, pair, rec, rev)
	hs.mu.Lock()
	if e := hs.entries[pair]; e != nil && e.rec.Token == rec.Token {
		e.rev, e.deposed = rev, deposed
		if err != nil {
			e.dirty = true
		}
	}
	hs.mu.Unlock()
	switch {
	case deposed:
		hs.log.Info().Str("source", pair).Uint64("token", rec.Token).Msg("fleet: a newer owner's handoff is recorded; this relay records this source's no more")
	case err != nil:
		hs.log.Debug().Err(err).Str("source", pair).Msg("fleet: handoff not written; retried")
	}
	return err
}

// syncer returns the handoff sync (uaclient.WithHandoffSync) of pair's
// instance that runs under the lease of token: it writes pair's record
// now, not at the next write interval, and returns once it is written.
// A switch of the pair's serving session waits for it, so that no
// successor takes the subscription it switched from over once anything
// of the new one is stored.
func (hs *handoffStore) syncer(pair string, token uint64) func(context.Context) error {
	return func(ctx context.Context) error {
		hs.wmu.Lock()
		defer hs.wmu.Unlock()
		hs.mu.Lock()
		e := hs.entries[pair]
		if e == nil || e.deposed || e.rec.Token != token || !e.dirty {
			hs.mu.Unlock()
			return nil // written, or no longer this instance's to write
		}
		if tok, ok := hs.valid(pair); !ok || tok != token {
			hs.mu.Unlock()
			return fmt.Errorf("fleet: source %s: the lease is not valid now; its handoff is written when it is", pair)
		}
		rec, rev := e.take()
		hs.mu.Unlock()
		err := hs.writeEntry(ctx, pair, rec, rev)
		if err != nil {
			hs.kick()
		}
		return err
	}
}

// write writes rec over the revision rev (0: read the key first) and
// returns the new revision; deposed is true when the key holds a newer
// owner's record.
func (hs *handoffStore) write(ctx context.Context, pair string, rec handoffRecord, rev uint64) (newRev uint64, deposed bool, err error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, hs.timeout)
	defer cancel()
	if rev == 0 {
		cur, err := hs.kv.Get(ctx, pair)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			newRev, err = hs.kv.Create(ctx, pair, data)
			return newRev, false, err
		case err != nil:
			return 0, false, err
		}
		var have handoffRecord
		if json.Unmarshal(cur.Value(), &have) == nil && have.Token > rec.Token {
			return cur.Revision(), true, nil
		}
		rev = cur.Revision()
	}
	newRev, err = hs.kv.Update(ctx, pair, data, rev)
	if err != nil {
		// Another write came in between: read it next time.
		return 0, false, err
	}
	return newRev, false, nil
}

// recording reports whether pair's instance records its handoff under
// the lease held now: an OPC UA source whose next owner would take its
// subscription over.
func (hs *handoffStore) recording(pair string) bool {
	tok, ok := hs.valid(pair)
	hs.mu.Lock()
	defer hs.mu.Unlock()
	e := hs.entries[pair]
	return ok && e != nil && !e.deposed && e.rec.Token == tok
}

// finish writes pair's record now, if it changed since the last write,
// while the lease is valid, and writes that pair no more under this
// lease: its instance is closed (fleetPart.onRelease), and the next owner
// takes over from this record.
func (hs *handoffStore) finish(ctx context.Context, pair string) {
	hs.wmu.Lock()
	defer hs.wmu.Unlock()
	hs.mu.Lock()
	e := hs.entries[pair]
	if e == nil || e.deposed {
		hs.mu.Unlock()
		return
	}
	tok, ok := hs.valid(pair)
	dirty := e.dirty && ok && tok == e.rec.Token
	rec, rev := e.take()
	e.deposed = true
	hs.mu.Unlock()
	if !dirty {
		return
	}
	if _, deposed, err := hs.write(ctx, pair, rec, rev); err != nil || deposed {
		hs.log.Warn().Err(err).Bool("deposed", deposed).Str("source", pair).
			Msg("fleet: the final handoff was not written; the next owner asks for what the last record names")
	}
}

// takeover returns the handoff recorded for pair by an owner older than
// the lease of token: ok is false when there is none. A record that
// cannot be read, of another version or of another pair is ignored with a
// warning.
func (hs *handoffStore) takeover(pair string, token uint64) (h uaclient.Handoff, ok bool) {
	rec, ok := hs.previous(pair, token)
	if !ok {
		return h, false
	}
	if h, ok = rec.Endpoints[rec.Serving]; !ok {
		hs.ignored(pair, fmt.Sprintf("no handoff for its serving endpoint %q", rec.Serving), nil)
		return h, false
	}
	msg := "fleet: taking over the previous owner's subscription"
	if h.DataSub == 0 {
		msg = "fleet: the previous owner had just switched to its " + h.Endpoint + ": starting there, with new subscriptions"
	}
	hs.log.Info().Str("source", pair).Str("from", rec.Relay).Uint64("token", rec.Token).Msg(msg)
	return h, true
}

// previous returns the record of pair written by an owner older than the
// lease of token: ok is false when there is none. A record that cannot be
// read, of another version or of another pair is ignored with a warning.
func (hs *handoffStore) previous(pair string, token uint64) (rec handoffRecord, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), hs.timeout)
	defer cancel()
	e, err := hs.kv.Get(ctx, pair)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, false
	}
	if err != nil {
		hs.ignored(pair, "unreadable", err)
		return rec, false
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		hs.ignored(pair, "not a handoff record", err)
		return rec, false
	}
	switch {
	case rec.Version != handoffVersion:
		hs.ignored(pair, fmt.Sprintf("version %d, this relay reads %d", rec.Version, handoffVersion), nil)
		return rec, false
	case rec.Source != pair:
		hs.ignored(pair, fmt.Sprintf("written for source %q", rec.Source), nil)
		return rec, false
	case rec.Token >= token:
		// Written under this lease or a newer one: nothing to take over.
		return rec, false
	}
	return rec, true
}

// ignored warns of pair's record not taken over, and why.
func (hs *handoffStore) ignored(pair, why string, err error) {
	hs.log.Warn().Err(err).Str("source", pair).Msg("fleet: handoff ignored (" + why + "): new subscriptions and a refresh for this source")
}

// close stops the writer; idempotent. What changed since the last write
// is not written: the relay's sources are closed, and a successor asks
// for at most a write interval of messages again (the stream drops them).
func (hs *handoffStore) close() {
	hs.mu.Lock()
	started, closed := hs.started, hs.closed
	hs.closed = true
	hs.mu.Unlock()
	if closed || !started {
		return
	}
	close(hs.stop)
	<-hs.done
}

// handoffOptions adds to opts, for the instance of OPC UA pair being built
// under a won lease, the recorder of its handoff, the close that leaves
// its data subscription for the next owner, and the takeover of the
// previous owner's. Unchanged without fleet.handoff, and for the instance
// built before the lease was first won (never started with a handoff).
func (f *fleetPart) handoffOptions(pair string, opts []uaclient.PairOption) []uaclient.PairOption {
	hs := f.handoffs.Load()
	token := f.buildingToken(pair)
	if hs == nil || token == 0 {
		return opts
	}
	opts = append(slices.Clip(opts), uaclient.WithHandoffRecorder(hs.recorder(pair, token)),
		uaclient.WithHandoffSync(hs.syncer(pair, token)), uaclient.WithKeepSubscriptionAtClose())
	if h, ok := hs.takeover(pair, token); ok {
		opts = append(opts, uaclient.WithTakeover(h))
	}
	return opts
}
