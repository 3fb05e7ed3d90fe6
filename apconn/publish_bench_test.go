package apconn

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// BenchmarkPublishLedger is the Conn's own part of a publish, without
// nats.go's: the lock, the sequence number, the room in the replay buffer
// and the ledger entry. Publishes are held (no broker), and every 4,096 of
// them are marked sent and confirmed, with the timer stopped, as the
// confirm tick would.
//
//	go test -run '^$' -bench '^BenchmarkPublishLedger$' -benchmem ./apconn/
func BenchmarkPublishLedger(b *testing.B) {
	c := &Conn{}
	c.pub.ledger.max = 8 << 20
	m := &nats.Msg{Subject: "apbridge.sim.Line1.T1", Data: make([]byte, 200), Header: nats.Header{"Apb-Seq": {"1"}}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := c.PublishOwned(m); err != nil {
			b.Fatal(err)
		}
		if i++; i%4096 == 0 {
			b.StopTimer()
			l := &c.pub.ledger
			for _, e := range l.all() {
				e.gen = 1
			}
			l.confirm(1, c.pub.nextSeq)
			b.StartTimer()
		}
	}
}
