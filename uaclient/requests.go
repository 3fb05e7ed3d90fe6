package uaclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// The nodes the Pair reads itself; new each time, since a NodeID is
// mutable and requests run concurrently.
func nodeServiceLevel() *ua.NodeID { return ua.NewNumericNodeID(0, id.Server_ServiceLevel) }

func nodeNamespaceArray() *ua.NodeID { return ua.NewNumericNodeID(0, id.Server_NamespaceArray) }

func nodeCurrentTime() *ua.NodeID { return ua.NewNumericNodeID(0, id.Server_ServerStatus_CurrentTime) }

func msFloat(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// send sends req and stores the response in *res, which must be a pointer
// to the response type.
func send[T ua.Response](ctx context.Context, c *opcua.Client, req ua.Request) (T, error) {
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

// Subscription priorities. When several subscriptions of a session have
// something to send and fewer Publish requests are queued, a server should
// answer the one with the highest priority first (Part 4,
// CreateSubscription). The health subscription outranks the data one so
// that a ServiceLevel change does not queue behind a burst of data
// changes: a server leaving its pair turns every tag Bad in the same
// moment it drops its level, and at 10,000 tags that burst fills several
// responses.
const (
	priorityHealth byte = 200
	priorityData   byte = 100
)

// createSubscription creates a subscription publishing every interval,
// with a keep-alive every keepAlive intervals, that outlives outlive
// without Publish requests, and returns what the server granted.
func createSubscription(ctx context.Context, c *opcua.Client, interval time.Duration, keepAlive uint32, outlive time.Duration, priority byte) (uint32, SubscriptionParams, error) {
	res, err := send[*ua.CreateSubscriptionResponse](ctx, c, &ua.CreateSubscriptionRequest{
		RequestedPublishingInterval: msFloat(interval),
		RequestedLifetimeCount:      lifetimeCount(interval, keepAlive, outlive),
		RequestedMaxKeepAliveCount:  keepAlive,
		PublishingEnabled:           true,
		Priority:                    priority,
	})
	if err != nil {
		return 0, SubscriptionParams{}, err
	}
	return res.SubscriptionID, SubscriptionParams{
		Interval:       time.Duration(res.RevisedPublishingInterval * float64(time.Millisecond)),
		LifetimeCount:  res.RevisedLifetimeCount,
		KeepAliveCount: res.RevisedMaxKeepAliveCount,
	}, nil
}

func monitorRequest(node *ua.NodeID, handle uint32, samplingMS float64, queue uint32, mode ua.MonitoringMode) *ua.MonitoredItemCreateRequest {
	return &ua.MonitoredItemCreateRequest{
		ItemToMonitor:  &ua.ReadValueID{NodeID: node, AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}},
		MonitoringMode: mode,
		RequestedParameters: &ua.MonitoringParameters{
			ClientHandle:     handle,
			SamplingInterval: samplingMS,
			QueueSize:        queue,
			DiscardOldest:    true,
			Filter:           ua.NewExtensionObject(nil),
		},
	}
}

// itemRequest is monitorRequest for a data item, with its queue policy and
// data-change filter.
func itemRequest(node *ua.NodeID, it itemSpec, mode ua.MonitoringMode) *ua.MonitoredItemCreateRequest {
	r := monitorRequest(node, it.handle, msFloat(it.sampling), it.queue, mode)
	r.RequestedParameters.DiscardOldest = it.discardOldest
	r.RequestedParameters.Filter = it.filter.encode()
	return r
}

func createItems(ctx context.Context, c *opcua.Client, sub uint32, reqs []*ua.MonitoredItemCreateRequest) ([]*ua.MonitoredItemCreateResult, error) {
	res, err := send[*ua.CreateMonitoredItemsResponse](ctx, c, &ua.CreateMonitoredItemsRequest{
		SubscriptionID:     sub,
		TimestampsToReturn: ua.TimestampsToReturnBoth,
		ItemsToCreate:      reqs,
	})
	if err != nil {
		return nil, err
	}
	if len(res.Results) != len(reqs) {
		return nil, fmt.Errorf("CreateMonitoredItems answered %d results for %d items", len(res.Results), len(reqs))
	}
	return res.Results, nil
}

func readValues(ctx context.Context, c *opcua.Client, nodes []*ua.NodeID) ([]*ua.DataValue, error) {
	rv := make([]*ua.ReadValueID, len(nodes))
	for i, n := range nodes {
		rv[i] = &ua.ReadValueID{NodeID: n, AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}}
	}
	res, err := send[*ua.ReadResponse](ctx, c, &ua.ReadRequest{NodesToRead: rv, TimestampsToReturn: ua.TimestampsToReturnBoth})
	if err != nil {
		return nil, err
	}
	if len(res.Results) != len(nodes) {
		return nil, fmt.Errorf("uaclient: the Read answered %d results for %d nodes", len(res.Results), len(nodes))
	}
	return res.Results, nil
}

func readValue(ctx context.Context, c *opcua.Client, node *ua.NodeID) (*ua.DataValue, error) {
	dvs, err := readValues(ctx, c, []*ua.NodeID{node})
	if err != nil {
		return nil, err
	}
	return dvs[0], nil
}

type readKind uint8

const (
	readPoll readKind = iota
	readProbe
)

// read reads ServiceLevel within the read timeout and posts the answer.
// It returns false if the session is closing (nothing is posted then).
func (c *conn) read(kind readKind, probe servicelevel.ProbeID) bool {
	if !c.acquire() {
		return false
	}
	timeout := c.p.set.ReadTimeout
	go func() {
		defer c.release()
		ctx, cancel := context.WithTimeout(c.ctx, timeout)
		defer cancel()
		dv, err := readValue(ctx, c.client, nodeServiceLevel())
		if err != nil && c.ctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("ServiceLevel read past its %v deadline", timeout)
		}
		c.p.post(evRead{s: c.s, kind: kind, probe: probe, dv: dv, err: err})
	}()
	return true
}

// write writes value to node on this session; the caller holds acquire.
func (c *conn) write(ctx context.Context, node *ua.NodeID, value *ua.Variant) (ua.StatusCode, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	res, err := send[*ua.WriteResponse](ctx, c.client, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID:      node,
		AttributeID: ua.AttributeIDValue,
		Value:       &ua.DataValue{EncodingMask: ua.DataValueValue, Value: value},
	}}})
	if err != nil {
		if c.ctx.Err() != nil && ctx.Err() != nil {
			return ua.StatusBadNotConnected, fmt.Errorf("uaclient: write on %s: the session ended", c.ep)
		}
		return ua.StatusBadCommunicationError, fmt.Errorf("uaclient: write on %s: %w", c.ep, err)
	}
	if len(res.Results) != 1 {
		return ua.StatusBadUnexpectedError, fmt.Errorf("uaclient: write on %s: %d results for 1 node", c.ep, len(res.Results))
	}
	code := res.Results[0]
	if code != ua.StatusOK {
		return code, fmt.Errorf("uaclient: write on %s: %w", c.ep, code)
	}
	return code, nil
}
