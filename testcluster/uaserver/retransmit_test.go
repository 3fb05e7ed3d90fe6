package uaserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
)

// sendAs sends req on c and returns the response as T. A service fault
// is the error (gopcua hands it to the handler too).
func sendAs[T ua.Response](t *testing.T, ctx context.Context, c *opcua.Client, req ua.Request) (T, error) {
	t.Helper()
	var res T
	err := c.Send(ctx, req, func(v ua.Response) error {
		r, ok := v.(T)
		if !ok {
			return fmt.Errorf("got %T in answer to %T", v, req)
		}
		res = r
		return nil
	})
	return res, err
}

// monitorNode adds a Reporting item on the Value of nid, with handle,
// sampling interval and queue size, to subscription subID.
func monitorNode(t *testing.T, ctx context.Context, c *opcua.Client, subID uint32, nid *ua.NodeID, handle uint32, samplingMS float64, queue uint32) {
	t.Helper()
	if _, err := sendAs[*ua.CreateMonitoredItemsResponse](t, ctx, c, &ua.CreateMonitoredItemsRequest{
		SubscriptionID: subID, TimestampsToReturn: ua.TimestampsToReturnBoth,
		ItemsToCreate: []*ua.MonitoredItemCreateRequest{{
			ItemToMonitor:  &ua.ReadValueID{NodeID: nid, AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}},
			MonitoringMode: ua.MonitoringModeReporting,
			RequestedParameters: &ua.MonitoringParameters{
				ClientHandle: handle, SamplingInterval: samplingMS, QueueSize: queue, DiscardOldest: true, Filter: ua.NewExtensionObject(nil),
			},
		}},
	}); err != nil {
		t.Fatal(err)
	}
}

// A session outlives its channel: after the connection is reset, a new
// channel activates the same session, and Republish sends again the data
// message that went unacknowledged; an acknowledged one is gone.
func TestOPCUASessionMovesToANewChannelAndRepublishes(t *testing.T) {
	p := startPair(t)
	c := dial(t, p.A().Endpoint())
	ctx := ctx5s(t)
	cs, err := sendAs[*ua.CreateSubscriptionResponse](t, ctx, c.Client, &ua.CreateSubscriptionRequest{
		RequestedPublishingInterval: 20, RequestedLifetimeCount: 1000, RequestedMaxKeepAliveCount: 50, PublishingEnabled: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	subID := cs.SubscriptionID
	monitorNode(t, ctx, c.Client, subID, nidCurrentTime, 7, 20, 10)
	// dataMessage publishes, acknowledging acks, until a data message
	// comes.
	dataMessage := func(acks ...uint32) *ua.PublishResponse {
		t.Helper()
		for {
			req := &ua.PublishRequest{SubscriptionAcknowledgements: []*ua.SubscriptionAcknowledgement{}}
			for _, a := range acks {
				req.SubscriptionAcknowledgements = append(req.SubscriptionAcknowledgements,
					&ua.SubscriptionAcknowledgement{SubscriptionID: subID, SequenceNumber: a})
			}
			acks = nil
			res, err := sendAs[*ua.PublishResponse](t, ctx, c.Client, req)
			if err != nil {
				t.Fatal(err)
			}
			if nm := res.NotificationMessage; nm != nil && len(nm.NotificationData) > 0 {
				return res
			}
		}
	}
	first := dataMessage()
	s1 := first.NotificationMessage.SequenceNumber
	second := dataMessage(s1)
	s2 := second.NotificationMessage.SequenceNumber
	if !slices.Contains(second.AvailableSequenceNumbers, s2) || slices.Contains(second.AvailableSequenceNumbers, s1) {
		t.Fatalf("after acknowledging %d: available %v, want %d and not %d", s1, second.AvailableSequenceNumbers, s2, s1)
	}

	if n := p.A().ResetConns(); n < 1 {
		t.Fatalf("%d connections reset", n)
	}
	c.waitState(opcua.Disconnected, 3*time.Second)
	sess, _ := c.DetachSession(ctx)
	c2, err := opcua.NewClient(p.A().Endpoint(), opcua.SecurityMode(ua.MessageSecurityModeNone), opcua.AutoReconnect(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c2.Close(ctx)
	})
	if err := c2.Dial(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c2.ActivateSession(ctx, sess); err != nil {
		t.Fatalf("activate the session on a new channel: %v", err)
	}
	rep, err := sendAs[*ua.RepublishResponse](t, ctx, c2, &ua.RepublishRequest{SubscriptionID: subID, RetransmitSequenceNumber: s2})
	if err != nil {
		t.Fatalf("republish %d: %v", s2, err)
	}
	if nm := rep.NotificationMessage; nm == nil || nm.SequenceNumber != s2 || len(nm.NotificationData) != len(second.NotificationMessage.NotificationData) {
		t.Fatalf("republish %d: %+v", s2, rep.NotificationMessage)
	}
	if _, err := sendAs[*ua.RepublishResponse](t, ctx, c2, &ua.RepublishRequest{SubscriptionID: subID, RetransmitSequenceNumber: s1}); !errors.Is(err, ua.StatusBadMessageNotAvailable) {
		t.Fatalf("republish of acknowledged %d: %v, want Bad_MessageNotAvailable", s1, err)
	}
	// The subscription goes on publishing on the new channel.
	res, err := sendAs[*ua.PublishResponse](t, ctx, c2, &ua.PublishRequest{SubscriptionAcknowledgements: []*ua.SubscriptionAcknowledgement{
		{SubscriptionID: subID, SequenceNumber: s2}, {SubscriptionID: subID, SequenceNumber: s1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.SubscriptionID != subID || !slices.Equal(res.Results, []ua.StatusCode{ua.StatusOK, ua.StatusBadSequenceNumberUnknown}) {
		t.Fatalf("publish on the new channel: subscription %d, ack results %v", res.SubscriptionID, res.Results)
	}
}
