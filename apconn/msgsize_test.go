package apconn_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/wire"
)

// The replay buffer counts what it holds on the heap for a kept message,
// within a quarter, for the messages the relay keeps (wire.EncodeMsg's,
// with and without headers), so that its bound in bytes bounds the
// memory. It keeps the payload and the header strings, not the message
// or its header map: those are dropped here once published, and must not
// count.
func TestMsgSizeIsWhatTheMessageHolds(t *testing.T) {
	now := time.Now()
	for _, headers := range []bool{true, false} {
		t.Run(fmt.Sprintf("headers=%v", headers), func(t *testing.T) {
			// Many messages, so that what the package's other goroutines
			// hold meanwhile is a small part per message.
			const n = 30000
			subjects := make([]string, n)
			for i := range subjects {
				subjects[i] = fmt.Sprintf("apbridge.line1.Counter%05d", i)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			c := apconn.HeldConn(1 << 30)
			for i := range n {
				u := wire.Update{Tag: subjects[i][15:], Value: int64(i), Status: wire.StatusGood, SourceTime: now, ServerTime: now, Seq: uint64(i)}
				m := wire.EncodeMsg(subjects[i], &u, wire.TypeInt64, 200, headers, false)
				if m.Header != nil {
					m.Header[wire.HeaderEpoch] = []string{"epoch"}
				}
				if err := c.PublishOwned(m); err != nil {
					t.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			held := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
			counted := float64(apconn.LedgerBytes(c)) / n
			runtime.KeepAlive(c)
			runtime.KeepAlive(subjects)
			if counted < 0.75*held || counted > 1.25*held {
				t.Fatalf("the buffer counts %.0f bytes a message for %.0f it holds", counted, held)
			}
			t.Logf("counted %.0f bytes a message, held %.0f", counted, held)
		})
	}
}
