package bridge

import (
	"context"
	"sync"
	"time"
)

// storeMarks are the AfterStored calls of one source waiting for the sink:
// each batch taken is settled by one Flush, so that however many marks a
// busy source sets, the sink is asked once per round trip. A Flush waits
// for what was published before it, not for the sink to go quiet (the
// core sink sends a PING behind the publishes; the JetStream sink waits
// until every update before its mark is acknowledged), so marks complete
// under continuous publishing too.
type storeMarks struct {
	mu   sync.Mutex
	fs   []func()
	wake chan struct{} // capacity 1: a mark was added
}

// AfterStored implements StoreNotifier.
func (r *runner) AfterStored(f func()) {
	m := &r.marks
	m.mu.Lock()
	m.fs = append(m.fs, f)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// flushRetry is how long the store loop waits after a Flush failed other
// than by its context before it asks again.
const flushRetry = 250 * time.Millisecond

// storeLoop settles the source's marks until ctx ends; marks still
// waiting then are dropped: their source is stopping.
func (r *runner) storeLoop(ctx context.Context) {
	m := &r.marks
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		}
		for {
			m.mu.Lock()
			fs := m.fs
			m.fs = nil
			m.mu.Unlock()
			if len(fs) == 0 {
				break
			}
			for {
				err := r.b.sink.Flush(ctx)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					return
				}
				r.b.log.Debug().Err(err).Str("source", r.src.Name()).Msg("flush for acknowledgements failed; asking again")
				t := time.NewTimer(flushRetry)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			for _, f := range fs {
				f()
			}
		}
	}
}
