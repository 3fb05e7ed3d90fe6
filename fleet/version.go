package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A fleet's config versions live in a bucket of their own beside the
// lease bucket, ConfigBucket(bucket): the lease bucket's TTL would expire
// a config nobody rewrites, and its history of 1 would lose the versions
// before. The config bucket has no TTL, keeps VersionHistory entries per
// key, and the lease bucket's replica count.
//
// Keys:
//
//	config            the fleet's config file as written (its revision is the version)
//	applied.<relayId> that relay's AppliedVersion (JSON)
const (
	// VersionKey holds the fleet's config; its revision is the version.
	VersionKey = "config"
	// appliedPrefix prefixes each relay's report of what it applied.
	appliedPrefix = "applied."
	// VersionHistory is how many versions of each key the config bucket
	// keeps, so that an earlier version can be read back (the server's
	// maximum is 64).
	VersionHistory = 16
	// noResponderWait bounds how long ReadVersion waits for a new
	// bucket's direct gets to be answered.
	noResponderWait = 5 * time.Second
)

// ConfigBucket is the name of the bucket of a fleet's config versions,
// beside its lease bucket (default DefaultBucket).
func ConfigBucket(bucket string) string {
	if bucket == "" {
		bucket = DefaultBucket
	}
	return bucket + "_config"
}

// AppliedVersion is what a relay reports of the fleet's versions: the one
// it runs and, when the latest one failed, why.
type AppliedVersion struct {
	// Version is the fleet version the relay runs; 0 while it runs its
	// own config file (no version was written, or none could be applied).
	Version uint64 `json:"version"`
	// Tried is the latest version the relay tried.
	Tried uint64 `json:"tried"`
	// Error is why Tried was not applied; "" when it was.
	Error string `json:"error,omitempty"`
	// At is when the relay wrote this report.
	At time.Time `json:"at"`
}

// OpenConfigBucket opens the config bucket of the fleet c, creating it
// when absent with VersionHistory and c's replica count.
func OpenConfigBucket(ctx context.Context, js jetstream.JetStream, c Config) (jetstream.KeyValue, error) {
	c = c.withDefaults()
	if err := checkJetStream(ctx, js); err != nil {
		return nil, err
	}
	name := ConfigBucket(c.Bucket)
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: "apbridge fleet config versions",
			History:     VersionHistory,
			Replicas:    c.Replicas,
			Storage:     jetstream.FileStorage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: config bucket %q: %w", name, err)
	}
	return kv, nil
}

// ReadVersion returns the fleet's current config and its version; ok is
// false when none was written.
//
// A bucket just created may not answer its direct gets for a moment (no
// responders yet on the server the relay is on): the read is tried again
// for up to noResponderWait, within ctx.
func ReadVersion(ctx context.Context, kv jetstream.KeyValue) (data []byte, version uint64, ok bool, err error) {
	e, err := kv.Get(ctx, VersionKey)
	for deadline := time.Now().Add(noResponderWait); errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return nil, 0, false, fmt.Errorf("fleet: read the config version: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
		e, err = kv.Get(ctx, VersionKey)
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, 0, false, nil
	case err != nil:
		return nil, 0, false, fmt.Errorf("fleet: read the config version: %w", err)
	}
	return e.Value(), e.Revision(), true, nil
}

// WriteVersion writes data as the fleet's next config version, on the
// condition that the current one is still prev (0: none was written), so
// that a version checked against prev is never written over a newer one.
// It returns the new version.
func WriteVersion(ctx context.Context, kv jetstream.KeyValue, data []byte, prev uint64) (uint64, error) {
	var rev uint64
	var err error
	if prev == 0 {
		rev, err = kv.Create(ctx, VersionKey, data)
	} else {
		rev, err = kv.Update(ctx, VersionKey, data, prev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("fleet: another version was written since version %d was read: read it and apply again", prev)
	}
	if err != nil {
		return 0, fmt.Errorf("fleet: write the config version: %w", err)
	}
	return rev, nil
}

// ReportApplied writes relay's report of what it applied.
func ReportApplied(ctx context.Context, kv jetstream.KeyValue, relay string, a AppliedVersion) error {
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, appliedPrefix+relay, data)
	return err
}

// ForgetApplied deletes relay's report (it leaves the fleet).
func ForgetApplied(ctx context.Context, kv jetstream.KeyValue, relay string) error {
	return kv.Delete(ctx, appliedPrefix+relay)
}

// readApplied fills st's config version and each live relay's report
// from the config bucket, if there is one.
func readApplied(ctx context.Context, js jetstream.JetStream, st *Status) error {
	kv, err := js.KeyValue(ctx, ConfigBucket(st.Bucket))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fleet: config bucket: %w", err)
	}
	_, st.ConfigVersion, _, err = ReadVersion(ctx, kv)
	if err != nil {
		return err
	}
	for i := range st.Relays {
		e, err := kv.Get(ctx, appliedPrefix+st.Relays[i].ID)
		if err != nil {
			continue // no report yet
		}
		var a AppliedVersion
		if json.Unmarshal(e.Value(), &a) == nil {
			st.Relays[i].Applied = &a
		}
	}
	return nil
}

// RunningVersion returns the fleet's version that the relays run: the
// newest one a relay reports as applied, read back from the key's
// history, and, when no relay runs one or it is no longer in the history,
// the current version. ok is false when no version was written. A new
// version is checked against this one: a current version no relay could
// apply must not block the one that fixes it.
func RunningVersion(ctx context.Context, kv jetstream.KeyValue) (data []byte, version uint64, ok bool, err error) {
	data, version, ok, err = ReadVersion(ctx, kv)
	if err != nil || !ok {
		return data, version, ok, err
	}
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, 0, false, fmt.Errorf("fleet: config bucket keys: %w", err)
	}
	var newest uint64
	for _, k := range keys {
		if !strings.HasPrefix(k, appliedPrefix) {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var a AppliedVersion
		if json.Unmarshal(e.Value(), &a) == nil && a.Version <= version {
			newest = max(newest, a.Version)
		}
	}
	if newest == 0 || newest == version {
		return data, version, true, nil
	}
	e, err := kv.GetRevision(ctx, VersionKey, newest)
	if err != nil {
		return data, version, true, nil // beyond the history
	}
	return e.Value(), newest, true, nil
}
