package apconn_test

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// The replay buffer counts what a kept message holds on the heap, within
// a quarter, for the messages the relay keeps (wire.EncodeMsg's, with and
// without headers), so that its bound in bytes bounds the memory.
func TestMsgSizeIsWhatTheMessageHolds(t *testing.T) {
	now := time.Now()
	for _, headers := range []bool{true, false} {
		t.Run(fmt.Sprintf("headers=%v", headers), func(t *testing.T) {
			// Many messages, so that what the package's other goroutines
			// allocate meanwhile is a small part per message.
			const n = 30000
			subjects := make([]string, n)
			for i := range subjects {
				subjects[i] = fmt.Sprintf("apbridge.line1.Counter%05d", i)
			}
			// What building the messages allocated, the least of three
			// tries: the package's other goroutines (a cluster's
			// connections) allocate and free meanwhile, which would move
			// a heap-in-use difference either way, but can only add to
			// the bytes allocated.
			var msgs []*nats.Msg
			held := math.Inf(1)
			for range 3 {
				msgs = make([]*nats.Msg, n)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i := range msgs {
					u := wire.Update{Tag: subjects[i][15:], Value: int64(i), Status: wire.StatusGood, SourceTime: now, ServerTime: now, Seq: uint64(i)}
					msgs[i] = wire.EncodeMsg(subjects[i], &u, wire.TypeInt64, 200, headers, false)
				}
				runtime.ReadMemStats(&after)
				held = min(held, float64(after.TotalAlloc-before.TotalAlloc)/n)
			}
			counted := float64(apconn.MsgSize(msgs[n/2]))
			runtime.KeepAlive(msgs)
			if counted < 0.75*held || counted > 1.25*held {
				t.Fatalf("the buffer counts %.0f bytes for a message that holds %.0f", counted, held)
			}
			t.Logf("counted %.0f bytes, held %.0f", counted, held)
		})
	}
}
