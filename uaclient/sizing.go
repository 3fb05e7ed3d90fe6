package uaclient

import (
	"math"
	"time"
)

// Sizing for a takeover. While no client sends Publish requests for a
// subscription (its relay died, and the successor is not there yet), the
// server keeps what its items sample in their queues, each at most
// queueSize values, the oldest dropped first; it keeps the subscription
// for lifetimeCount publishing intervals, and a session for its timeout
// (a subscription outlives its session: Part 4, 5.13.1). What it already
// sent and was not acknowledged waits in the subscription's retransmission
// queue instead (node-opcua keeps 100 messages, the embedded test server
// 256, Part 4 asks at least twice the Publish requests a session may have
// queued). So a takeover loses nothing when:
//
//   - each item's queue holds the takeover window at its sampling interval
//     (QueueSizeFor), for values that change at every sample;
//   - the subscription's lifetime is longer than the window (the Pair asks
//     for at least the window and the resume margin);
//   - the messages handed on and not yet stored (WithUnstoredLimit) fit
//     in the retransmission queue.

// Defaults and range of PairConfig.TakeoverWindowMilliseconds.
const (
	// DefaultTakeoverWindowMilliseconds is the window of a relay restarted
	// on its own (a crash, an upgrade): 10 s.
	DefaultTakeoverWindowMilliseconds = 10000
	MinTakeoverWindowMilliseconds     = 0
	MaxTakeoverWindowMilliseconds     = 3600000
)

// MinDerivedQueueSize is the smallest queue size QueueSizeFor gives: with
// the sampling interval equal to the publishing interval, the server's
// two timers drift against each other, and a cycle now and then finds two
// samples; a queue of 1 would drop the older (a lost value in steady
// operation).
const MinDerivedQueueSize = 2

// QueueSizeFor is the queue size an item sampled every sampling, in a
// subscription publishing every publishing, needs to lose no value while
// no Publish request comes for window: one value per sample of the window
// and of one publishing cycle (what the queue may hold when the window
// starts), and one for the timers' jitter; at least MinDerivedQueueSize
// and at most MaxQueueSize. A sampling interval of 0 (the server's fastest
// rate, unknown here) is counted as the publishing interval.
func QueueSizeFor(sampling, publishing, window time.Duration) uint32 {
	if sampling <= 0 {
		sampling = publishing
	}
	sampling = max(sampling, time.Millisecond)
	publishing = max(publishing, 0)
	window = max(window, 0)
	n := ceilDiv(window, sampling) + ceilDiv(publishing, sampling) + 1
	return uint32(min(max(n, MinDerivedQueueSize), MaxQueueSize))
}

// Covers reports how long a queue of size values covers at the sampling
// interval, once a publishing cycle's values and the jitter's are taken
// off: the inverse of QueueSizeFor.
func Covers(size uint32, sampling, publishing time.Duration) time.Duration {
	if sampling <= 0 {
		sampling = publishing
	}
	sampling = max(sampling, time.Millisecond)
	n := int64(size) - ceilDiv(max(publishing, 0), sampling) - 1
	if n <= 0 {
		return 0
	}
	return time.Duration(n) * sampling
}

func ceilDiv(a, b time.Duration) int64 {
	return int64((a + b - 1) / b)
}

// SubscriptionLifetime is how long the Pair asks a data subscription
// publishing every publishing to outlive its client: at least the session
// timeout, a minute, and the takeover window with the resume margin, so
// that a successor finds the subscription to take over.
func (set *PairSettings) SubscriptionLifetime() time.Duration {
	return time.Duration(lifetimeCount(set.PublishingInterval, dataKeepAlive(set.PublishingInterval), set.outlive())) *
		max(set.PublishingInterval, time.Millisecond)
}

// SessionTimeout is the session timeout the Pair asks for.
func (set *PairSettings) SessionTimeout() time.Duration { return set.sessionTimeout() }

// outlive is how long the Pair asks its subscriptions to outlive a client
// that sends nothing, before the server revises the session timeout.
func (set *PairSettings) outlive() time.Duration {
	return max(set.sessionTimeout(), set.TakeoverWindow+resumeMargin)
}

// dataKeepAlive is the data subscription's keep-alive count: a keep-alive
// every 5 s when nothing changes.
func dataKeepAlive(publishing time.Duration) uint32 {
	return uint32(min(max(1, 5*time.Second/max(publishing, time.Millisecond)), math.MaxUint32))
}
