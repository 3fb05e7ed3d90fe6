package natstest

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Publisher is what Traffic publishes through: a *nats.Conn, an
// *apconn.Conn, or anything else with this method.
type Publisher interface {
	Publish(subj string, data []byte) error
}

// Traffic publishes sequence-numbered messages at a fixed rate and checks
// what a subscriber receives: losses, duplicates, reordering and silences.
// Feed every received payload to Observe. Each payload carries its
// sequence number and send time.
type Traffic struct {
	pub    Publisher
	subj   string
	period time.Duration

	mu        sync.Mutex
	sent      uint64
	pubErrs   uint64
	sentAt    []time.Time // by sequence number - 1
	seen      map[uint64]int
	order     []uint64 // receive order
	lastRecv  time.Time
	maxGap    time.Duration
	maxGapAt  time.Time
	recvTimes []time.Time
	recvSent  []time.Time // send time carried by each received payload
	maxBlock  time.Duration

	stop context.CancelFunc
	done chan struct{}
}

// NewTraffic prepares a publisher of one message per period on subj.
func NewTraffic(pub Publisher, subj string, period time.Duration) *Traffic {
	return &Traffic{pub: pub, subj: subj, period: period, seen: map[uint64]int{}}
}

// TrafficPayloadSize is the size of a Traffic payload.
const TrafficPayloadSize = 16

// Start begins publishing on a goroutine of its own; Stop ends it.
func (t *Traffic) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	t.stop = cancel
	t.done = make(chan struct{})
	go t.run(ctx)
}

func (t *Traffic) run(ctx context.Context) {
	defer close(t.done)
	tick := time.NewTicker(t.period)
	defer tick.Stop()
	buf := make([]byte, TrafficPayloadSize)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.mu.Lock()
		seq := t.sent + 1
		now := time.Now()
		t.mu.Unlock()
		binary.BigEndian.PutUint64(buf[0:8], seq)
		binary.BigEndian.PutUint64(buf[8:16], uint64(now.UnixNano()))
		err := t.pub.Publish(t.subj, buf)
		block := time.Since(now)
		t.mu.Lock()
		t.maxBlock = max(t.maxBlock, block)
		if err != nil {
			t.pubErrs++
		} else {
			t.sent = seq
			t.sentAt = append(t.sentAt, now)
		}
		t.mu.Unlock()
	}
}

// Stop ends publishing and waits for the publisher goroutine.
func (t *Traffic) Stop() {
	if t.stop != nil {
		t.stop()
		<-t.done
	}
}

// Observe records a received payload.
func (t *Traffic) Observe(data []byte) {
	now := time.Now()
	if len(data) < TrafficPayloadSize {
		return
	}
	seq := binary.BigEndian.Uint64(data[0:8])
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen[seq]++
	t.order = append(t.order, seq)
	t.recvTimes = append(t.recvTimes, now)
	t.recvSent = append(t.recvSent, time.Unix(0, int64(binary.BigEndian.Uint64(data[8:16]))))
	if !t.lastRecv.IsZero() {
		if g := now.Sub(t.lastRecv); g > t.maxGap {
			t.maxGap, t.maxGapAt = g, now
		}
	}
	t.lastRecv = now
}

// Sent returns how many messages were published without error.
func (t *Traffic) Sent() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent
}

// WaitReceived waits until n distinct messages have been received.
func (t *Traffic) WaitReceived(ctx context.Context, n uint64) error {
	for {
		t.mu.Lock()
		got := uint64(len(t.seen))
		t.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natstest: traffic: received %d of %d", got, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Settle waits until every published message has been received or ctx is
// done (the remainder then counts as lost).
func (t *Traffic) Settle(ctx context.Context) {
	t.WaitReceived(ctx, t.Sent())
}

// TrafficReport summarises a Traffic run.
type TrafficReport struct {
	Sent          uint64
	PublishErrors uint64
	Received      uint64 // distinct messages
	Lost          uint64
	Duplicated    uint64
	OutOfOrder    uint64 // received after a higher sequence number
	// MaxGap is the longest silence between two receptions minus the
	// publish period.
	MaxGap   time.Duration
	MaxGapAt time.Time
}

// Report returns what was sent and received so far.
func (t *Traffic) Report() TrafficReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reportLocked(t.sent)
}

// ReportUpTo is Report for traffic that someone else published through
// Observe's payload format, sequence numbers 1 to sent.
func (t *Traffic) ReportUpTo(sent uint64) TrafficReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reportLocked(sent)
}

func (t *Traffic) reportLocked(sent uint64) TrafficReport {
	r := TrafficReport{Sent: sent, PublishErrors: t.pubErrs, MaxGapAt: t.maxGapAt}
	for seq, n := range t.seen {
		if seq == 0 || seq > sent {
			continue
		}
		r.Received++
		if n > 1 {
			r.Duplicated += uint64(n - 1)
		}
	}
	r.Lost = r.Sent - r.Received
	// A message counts as out of order when it is first received after a
	// higher sequence number; a later copy of one already received is a
	// duplicate, not a reordering.
	var hi uint64
	first := make(map[uint64]bool, len(t.seen))
	for _, s := range t.order {
		if first[s] {
			continue
		}
		first[s] = true
		if s < hi {
			r.OutOfOrder++
		} else {
			hi = s
		}
	}
	if t.maxGap > t.period {
		r.MaxGap = t.maxGap - t.period
	}
	return r
}

// MaxGapBetween returns the longest silence that the delivery path caused,
// among those that ended between from and to: the time between two
// receptions minus the time between their publications. A publisher that
// was itself late (a scheduler or GC pause of the test process) does not
// count; a publisher held up inside Publish shows in MaxPublishBlock.
func (t *Traffic) MaxGapBetween(from, to time.Time) (time.Duration, time.Time) {
	return t.gapBetween(from, to, true)
}

// RawGapBetween is MaxGapBetween counting every silence beyond the nominal
// publish period, whatever caused it.
func (t *Traffic) RawGapBetween(from, to time.Time) (time.Duration, time.Time) {
	return t.gapBetween(from, to, false)
}

func (t *Traffic) gapBetween(from, to time.Time, delivery bool) (time.Duration, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var worst time.Duration
	var at time.Time
	for i := 1; i < len(t.recvTimes); i++ {
		r := t.recvTimes[i]
		if r.Before(from) || r.After(to) {
			continue
		}
		g := r.Sub(t.recvTimes[i-1])
		if delivery {
			g -= max(t.recvSent[i].Sub(t.recvSent[i-1]), 0)
		} else {
			g -= t.period
		}
		if g > worst {
			worst, at = g, r
		}
	}
	return worst, at
}

// MaxPublishBlock returns the longest a Publish call took.
func (t *Traffic) MaxPublishBlock() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxBlock
}

// FirstSentAfter returns the sequence number of the first message published
// at or after at, or 0.
func (t *Traffic) FirstSentAfter(at time.Time) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.sentAt), func(i int) bool { return !t.sentAt[i].Before(at) })
	if i == len(t.sentAt) {
		return 0
	}
	return uint64(i + 1)
}

// ReceivedAt returns when message seq was first received, if it was.
func (t *Traffic) ReceivedAt(seq uint64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, s := range t.order {
		if s == seq {
			return t.recvTimes[i], true
		}
	}
	return time.Time{}, false
}

// FirstReceivedFrom returns when the first message with a sequence number
// of at least seq was received, if one was.
func (t *Traffic) FirstReceivedFrom(seq uint64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, s := range t.order {
		if s >= seq {
			return t.recvTimes[i], true
		}
	}
	return time.Time{}, false
}

// FirstReceivedAfter returns when the first message received at or after
// at was received, if one was.
func (t *Traffic) FirstReceivedAfter(at time.Time) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.recvTimes), func(i int) bool { return !t.recvTimes[i].Before(at) })
	if i == len(t.recvTimes) {
		return time.Time{}, false
	}
	return t.recvTimes[i], true
}

// DuplicateSeqs returns up to n sequence numbers received more than once,
// to help explain a report.
func (t *Traffic) DuplicateSeqs(n int) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []uint64
	for i, s := range t.order {
		if len(out) >= n {
			break
		}
		if t.seen[s] > 1 {
			for _, prev := range t.order[:i] {
				if prev == s {
					out = append(out, s)
					break
				}
			}
		}
	}
	return out
}
