package uaclient

import "time"

// Test-only options, for the real-server tests of package uaclient_test.

// WithPartnerRetry sets how long after a partner discovery that found
// nothing the next one starts (default PartnerRetryInterval).
func WithPartnerRetry(d time.Duration) PairOption {
	return func(o *options) error {
		o.partnerRetry = d
		return nil
	}
}

// WithPublishers sets how many Publish requests each session keeps
// outstanding (default defaultPublishers).
func WithPublishers(n int) PairOption {
	return func(o *options) error {
		o.publishers = n
		return nil
	}
}

// WithStrictPhases makes a session transition that the phase table does
// not list panic instead of logging it.
func WithStrictPhases() PairOption {
	return func(o *options) error {
		o.strictPhases = true
		return nil
	}
}

// WithDroppedMessages drops the data messages for whose sequence number
// drop returns true, as if they never arrived: a gap only Republish can
// fill.
func WithDroppedMessages(drop func(seq uint32) bool) PairOption {
	return func(o *options) error {
		o.dropMessage = drop
		return nil
	}
}
