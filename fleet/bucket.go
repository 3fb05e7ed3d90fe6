package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// openBucket opens the fleet's bucket, creating it when absent, and checks
// that an existing one has the settings the leases rely on: the TTL is
// the lease TTL, limit markers tell watchers of expiry, and the replica
// count is the configured one.
func openBucket(ctx context.Context, js jetstream.JetStream, c Config) (jetstream.KeyValue, error) {
	if err := checkJetStream(ctx, js); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, c.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         c.Bucket,
			Description:    "apbridge fleet leases",
			History:        1,
			TTL:            c.LeaseTTL,
			LimitMarkerTTL: c.LeaseTTL,
			Replicas:       c.Replicas,
			Storage:        jetstream.FileStorage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			// Another member created it first.
			kv, err = js.KeyValue(ctx, c.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: bucket %q: %w", c.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet: bucket %q status: %w", c.Bucket, err)
	}
	var errs []error
	if st.TTL() != c.LeaseTTL {
		errs = append(errs, fmt.Errorf("fleet: bucket %q has TTL %v, but leaseTTL is %v: every member of a fleet must use the bucket's TTL (or delete the bucket to recreate it)", c.Bucket, st.TTL(), c.LeaseTTL))
	}
	if st.LimitMarkerTTL() == 0 {
		errs = append(errs, fmt.Errorf("fleet: bucket %q has no limit markers (LimitMarkerTTL 0): members would not see leases expire; recreate it", c.Bucket))
	}
	if r := st.Config().Replicas; r != c.Replicas {
		errs = append(errs, fmt.Errorf("fleet: bucket %q has %d replicas, but replicas is %d: set replicas to match, or delete the bucket to recreate it", c.Bucket, r, c.Replicas))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return kv, nil
}

// checkJetStream returns a clear error when the cluster has no JetStream.
func checkJetStream(ctx context.Context, js jetstream.JetStream) error {
	if _, err := js.AccountInfo(ctx); err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return fmt.Errorf("fleet: the NATS cluster has no JetStream (%w): a fleet keeps its leases in a JetStream KV bucket; enable JetStream on the servers", err)
		}
		return fmt.Errorf("fleet: JetStream account info: %w", err)
	}
	return nil
}
