package uaclient_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uacp"
)

// Delivery order against a real server: many tags ticking every 10 ms,
// queued ten deep, so that every 100 ms publishing cycle is more than one
// PublishResponse (the client's 8 KiB receive buffer makes the server
// split it), and the values of one tag are spread over consecutive
// responses, older first. Four Publish requests are outstanding, so
// consecutive responses reach the Pair on different goroutines at the
// same moment. Handed on in arrival order, a tag's value goes back in
// time whenever a later response overtakes an earlier one; handed on in
// sequence-number order, it never does.
func TestPairDeliversInSequenceOrder(t *testing.T) {
	const tags = 48
	r := newRig(t, rigOption{
		levels:  [2]byte{250, 240},
		servers: []uaserver.Option{uaserver.WithTags(tags), uaserver.WithTagInterval(10 * time.Millisecond)},
		cfg: func(c *uaclient.PairConfig) {
			c.QueueSize = new(10)
			c.SamplingIntervalMilliseconds = new(10)
		},
		opts: []uaclient.PairOption{
			uaclient.WithPublishers(4),
			// Not opcua.ReceiveBufferSize: in gopcua v0.8.0 it writes
			// to the package-level default of every client.
			uaclient.WithClientOptions(opcua.Dialer(&uacp.Dialer{ClientACK: &uacp.Acknowledge{
				ReceiveBufSize: 8192, SendBufSize: uacp.DefaultSendBufSize,
			}})),
		},
	})
	more := make([]uaclient.Item, 0, tags-testTags)
	for i, tag := range r.servers.Tags()[testTags:tags] {
		more = append(more, uaclient.Item{Handle: uint32(testTags + i), NodeID: tag.NodeID().String()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	res, err := r.pair.AddItems(ctx, more)
	if err != nil {
		t.Fatal(err)
	}
	for _, ir := range res {
		if ir.Err != nil {
			t.Fatalf("item %d: %v", ir.Handle, ir.Err)
		}
	}
	before := r.servers.A().Stats()
	// About two seconds of ticks for every tag.
	r.waitUpdates(mark{}, tags*200, "data changes", dataFrom(servicelevel.Primary))
	after := r.servers.A().Stats()

	// More responses than the 100 ms cycles: cycles were split.
	t.Logf("%d notifications in %d data responses", after.Notifications-before.Notifications,
		after.Publishes-after.KeepAlives-(before.Publishes-before.KeepAlives))

	type last struct {
		src  time.Time
		kind uaclient.UpdateKind
	}
	seen := map[uint32]last{}
	back, checked := 0, 0
	for _, u := range r.updatesSince(mark{}) {
		if u.Kind != uaclient.UpdateData && u.Kind != uaclient.UpdateRefreshValue || u.Value == nil {
			continue
		}
		src := u.Value.SourceTimestamp
		if l, ok := seen[u.Handle]; ok && src.Before(l.src) {
			if back < 5 {
				t.Errorf("item %d went back in source time: %s after %s (%s after %s)",
					u.Handle, src.Format("15:04:05.000"), l.src.Format("15:04:05.000"), u.Kind, l.kind)
			}
			back++
		}
		checked++
		seen[u.Handle] = last{src, u.Kind}
	}
	if back > 0 {
		t.Errorf("%d of %d values went back in source time", back, checked)
	}
	if len(seen) != tags {
		t.Errorf("values of %d items, want %d", len(seen), tags)
	}
	for _, k := range []uaclient.EventKind{uaclient.EventNotificationsLost, uaclient.EventSessionLost, uaclient.EventFailover} {
		if evs := r.eventsSince(mark{}, k); len(evs) > 0 {
			t.Errorf("%s: %s", k, evs[0].Message)
		}
	}
}

// A data message that never arrives, and that the server cannot send again
// (the test servers keep no retransmission queue here, so Republish answers
// Bad_MessageNotAvailable), is reported once with its sequence numbers,
// before the data that follows it, and delivery goes on: the session
// survives the Republish fault and the held messages are handed on.
func TestPairReportsAnUnrecoverableGap(t *testing.T) {
	dropped := []uint32{5, 6}
	r := newRig(t, rigOption{
		levels:  [2]byte{250, 240},
		servers: []uaserver.Option{uaserver.WithRetransmitQueue(0)},
		opts: []uaclient.PairOption{
			uaclient.WithDroppedMessages(func(seq uint32) bool { return slices.Contains(dropped, seq) }),
		},
	})
	lostEv := r.waitEvent(mark{}, "notifications lost", kind(uaclient.EventNotificationsLost))
	if !slices.Equal(lostEv.Missing, dropped) || lostEv.Endpoint != servicelevel.Primary || lostEv.Subscription == 0 ||
		!errors.Is(lostEv.Err, ua.StatusBadMessageNotAvailable) {
		t.Fatalf("event: %+v", lostEv)
	}
	if !strings.HasPrefix(lostEv.Message, "primary data subscription") || !strings.Contains(lostEv.Message, "messages 5-6") {
		t.Fatalf("message: %q", lostEv.Message)
	}
	// Delivery goes on: data after the event, from the same session.
	m := r.mark()
	r.waitUpdates(m, 3*testTags, "data changes after the gap", dataFrom(servicelevel.Primary))
	if n := len(r.eventsSince(mark{}, uaclient.EventNotificationsLost)); n != 1 {
		t.Fatalf("%d loss events, want 1", n)
	}
	if lost := r.eventsSince(mark{}, uaclient.EventSessionLost); len(lost) > 0 {
		t.Fatalf("the Republish fault ended a session: %s", lost[0].Message)
	}
	// The counters skip the lost ticks but never go back.
	r.checkCounters(r.updatesSince(mark{}))
}
