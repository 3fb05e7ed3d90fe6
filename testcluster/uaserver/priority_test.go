package uaserver

import (
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
)

// When two subscriptions of a session wait for a Publish request, the one
// the client gave the higher priority gets the next one, as Part 4 asks:
// a client that ranks its ServiceLevel subscription above its data must not
// see a level change queue behind a burst of data changes.
func TestOPCUAPublishServesTheHigherPriorityFirst(t *testing.T) {
	p := startPair(t)
	c := dial(t, p.A().Endpoint())
	ctx := ctx5s(t)
	// The low one reports CurrentTime, which changes all the time; the
	// high one reports ServiceLevel, which changes only when the test sets
	// it. Right after the high one is served it has nothing left to send,
	// so the next request shows that the low one had data waiting all
	// along (the control).
	create := func(priority byte, nid *ua.NodeID) uint32 {
		t.Helper()
		cs, err := sendAs[*ua.CreateSubscriptionResponse](t, ctx, c.Client, &ua.CreateSubscriptionRequest{
			RequestedPublishingInterval: 20, RequestedLifetimeCount: 1000, RequestedMaxKeepAliveCount: 50,
			PublishingEnabled: true, Priority: priority,
		})
		if err != nil {
			t.Fatal(err)
		}
		monitorNode(t, ctx, c.Client, cs.SubscriptionID, nid, 1, 10, 1)
		return cs.SubscriptionID
	}
	low := create(10, nidCurrentTime)
	high := create(200, nidServiceLevel)
	eng := p.A().eng
	bothLate := func() bool {
		eng.mu.Lock()
		defer eng.mu.Unlock()
		l, h := eng.subs[low], eng.subs[high]
		return l != nil && h != nil && l.late && h.late
	}
	publish := func() uint32 {
		t.Helper()
		res, err := sendAs[*ua.PublishResponse](t, ctx, c.Client, &ua.PublishRequest{SubscriptionAcknowledgements: []*ua.SubscriptionAcknowledgement{}})
		if err != nil {
			t.Fatal(err)
		}
		return res.SubscriptionID
	}
	for round := range 8 {
		p.A().SetLevel(byte(240 - round))
		deadline := time.Now().Add(3 * time.Second)
		for !bothLate() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the two subscriptions never both waited for a request", round)
			}
			time.Sleep(2 * time.Millisecond) // poll with a deadline
		}
		if got := publish(); got != high {
			t.Fatalf("round %d: the request went to subscription %d, want the higher priority %d", round, got, high)
		}
		if got := publish(); got != low {
			t.Fatalf("round %d: the next request went to subscription %d, want %d, which was late too", round, got, low)
		}
	}
}
