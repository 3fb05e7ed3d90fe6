package uaserver

import (
	"errors"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

func TestOPCUAPublishingIntervalZeroIsRevised(t *testing.T) {
	p := startPair(t)
	c := dial(t, p.A().Endpoint())
	// gopcua's client sends Interval/time.Millisecond, so 1µs goes out as
	// a requested publishing interval of 0, which panicked gopcua's server.
	sub := c.subscribe(time.Microsecond)
	if sub.RevisedPublishingInterval != 10*time.Millisecond {
		t.Fatalf("revised publishing interval %v, want the 10ms minimum", sub.RevisedPublishingInterval)
	}
	h := sub.monitor(1, nidServiceLevel)[0]
	sub.waitValue(h, 2*time.Second, isLevel(LevelPrimary))
	for _, ms := range []float64{-5, math.NaN(), math.Inf(1), 1e300} {
		var res *ua.CreateSubscriptionResponse
		err := c.Send(ctx5s(t), &ua.CreateSubscriptionRequest{RequestedPublishingInterval: ms, PublishingEnabled: true},
			func(v ua.Response) error {
				var ok bool
				res, ok = v.(*ua.CreateSubscriptionResponse)
				if !ok {
					return errors.New("not a CreateSubscriptionResponse")
				}
				return nil
			})
		if err != nil {
			t.Fatalf("interval %v: %v", ms, err)
		}
		if iv := res.RevisedPublishingInterval; iv < 10 || iv > float64(maxPublishingInterval/time.Millisecond) ||
			res.RevisedMaxKeepAliveCount == 0 || res.RevisedLifetimeCount < 3*res.RevisedMaxKeepAliveCount {
			t.Fatalf("interval %v revised to %v, keep-alive %d, lifetime %d", ms, iv, res.RevisedMaxKeepAliveCount, res.RevisedLifetimeCount)
		}
	}
	if got := c.level(); got != LevelPrimary {
		t.Fatalf("level %d", got)
	}
}

func TestOPCUAServicesAndBadRequests(t *testing.T) {
	p := startPair(t)
	c := dial(t, p.A().Endpoint())
	sub := c.subscribe(20 * time.Millisecond)
	h := sub.monitor(4, nidServiceLevel)[0]
	sub.waitValue(h, 2*time.Second, isLevel(LevelPrimary))
	ctx := ctx5s(t)

	// Unknown monitored items: gopcua's server dereferenced nil here.
	// gopcua's client checks ids itself, so send the requests raw.
	var mm *ua.SetMonitoringModeResponse
	err := c.Send(ctx, &ua.SetMonitoringModeRequest{
		SubscriptionID: sub.SubscriptionID, MonitoringMode: ua.MonitoringModeSampling, MonitoredItemIDs: []uint32{999999},
	}, func(v ua.Response) error { mm, _ = v.(*ua.SetMonitoringModeResponse); return nil })
	if err != nil || mm == nil || mm.Results[0] != ua.StatusBadMonitoredItemIDInvalid {
		t.Fatalf("SetMonitoringMode on an unknown item: %v, %+v", err, mm)
	}
	var dm *ua.DeleteMonitoredItemsResponse
	err = c.Send(ctx, &ua.DeleteMonitoredItemsRequest{SubscriptionID: sub.SubscriptionID, MonitoredItemIDs: []uint32{888888}},
		func(v ua.Response) error { dm, _ = v.(*ua.DeleteMonitoredItemsResponse); return nil })
	if err != nil || dm == nil || dm.Results[0] != ua.StatusBadMonitoredItemIDInvalid {
		t.Fatalf("DeleteMonitoredItems on an unknown item: %v, %+v", err, dm)
	}
	// Items that cannot be created.
	bad := []*ua.MonitoredItemCreateRequest{
		opcua.NewMonitoredItemCreateRequestWithDefaults(ua.NewStringNodeID(7, "nope"), ua.AttributeIDValue, 100),
		opcua.NewMonitoredItemCreateRequestWithDefaults(ua.NewNumericNodeID(0, id.Server), ua.AttributeIDValue, 101),
		opcua.NewMonitoredItemCreateRequestWithDefaults(nidServiceLevel, ua.AttributeIDExecutable, 102),
	}
	bad[0].MonitoringMode = ua.MonitoringModeReporting
	cm, err := sub.Monitor(ctx, ua.TimestampsToReturnBoth, bad...)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []ua.StatusCode{ua.StatusBadNodeIDUnknown, ua.StatusBadAttributeIDInvalid, ua.StatusBadAttributeIDInvalid} {
		if cm.Results[i].StatusCode != want {
			t.Errorf("item %d: %v, want %v", i, cm.Results[i].StatusCode, want)
		}
	}

	// Sampling queues without reporting; Reporting delivers the queue (the
	// standby side of Hot redundancy).
	if _, err := sub.SetMonitoringMode(ctx, ua.MonitoringModeSampling, 1); err != nil {
		t.Fatal(err)
	}
	p.A().SetLevel(120)
	p.A().SetLevel(130)
	if n, ok := sub.tryNext(h, 200*time.Millisecond); ok {
		t.Fatalf("a Sampling item reported %v", n.dv.Value.Value())
	}
	if _, err := sub.SetMonitoringMode(ctx, ua.MonitoringModeReporting, 1); err != nil {
		t.Fatal(err)
	}
	sub.waitValue(h, 2*time.Second, isLevel(120))
	sub.waitValue(h, 2*time.Second, isLevel(130))

	// ModifySubscription works (gopcua's server answered Unsupported).
	mr, err := sub.ModifySubscription(ctx, opcua.SubscriptionParameters{Interval: 30 * time.Millisecond})
	if err != nil || mr.RevisedPublishingInterval != 30 {
		t.Fatalf("ModifySubscription: %v, %+v", err, mr)
	}
	p.A().SetLevel(140)
	sub.waitValue(h, 2*time.Second, isLevel(140))

	// Browse with IncludeSubtypes=false made gopcua's server loop and
	// panic; it means "exactly this reference type".
	browse := func(refType uint32, subtypes bool) []*ua.ReferenceDescription {
		res, err := c.Browse(ctx, &ua.BrowseRequest{NodesToBrowse: []*ua.BrowseDescription{{
			NodeID: ua.NewNumericNodeID(0, id.Server), BrowseDirection: ua.BrowseDirectionForward,
			ReferenceTypeID: ua.NewNumericNodeID(0, refType), IncludeSubtypes: subtypes, ResultMask: 63,
		}}})
		if err != nil || res.Results[0].StatusCode != ua.StatusOK {
			t.Fatalf("browse: %v, %v", err, res)
		}
		return res.Results[0].References
	}
	if refs := browse(id.HierarchicalReferences, false); len(refs) != 0 {
		t.Fatalf("exactly HierarchicalReferences: %d references", len(refs))
	}
	refs := browse(id.HierarchicalReferences, true)
	names := map[string]bool{}
	for _, r := range refs {
		names[r.BrowseName.Name] = true
	}
	for _, n := range []string{"ServiceLevel", "ServerArray", "ServerStatus", "ServerRedundancy"} {
		if !names[n] {
			t.Errorf("Server has no %s in %v", n, names)
		}
	}
	if refs := browse(id.HasProperty, false); len(refs) != 3 {
		t.Errorf("Server has %d properties, want ServerArray, NamespaceArray, ServiceLevel", len(refs))
	}
	// Browse pages with continuation points.
	folder := ua.NewStringNodeID(simNS, "Tags0000")
	br, err := c.Browse(ctx, &ua.BrowseRequest{RequestedMaxReferencesPerNode: 5, NodesToBrowse: []*ua.BrowseDescription{{
		NodeID: folder, BrowseDirection: ua.BrowseDirectionForward, IncludeSubtypes: true, ResultMask: 63,
		ReferenceTypeID: ua.NewNumericNodeID(0, id.HierarchicalReferences),
	}}})
	if err != nil || len(br.Results[0].References) != 5 || len(br.Results[0].ContinuationPoint) == 0 {
		t.Fatalf("paged browse: %v, %+v", err, br)
	}
	browsed := len(br.Results[0].References)
	for cp := br.Results[0].ContinuationPoint; len(cp) > 0; {
		nr, err := c.BrowseNext(ctx, &ua.BrowseNextRequest{ContinuationPoints: [][]byte{cp}})
		if err != nil || nr.Results[0].StatusCode != ua.StatusOK {
			t.Fatalf("BrowseNext: %v, %+v", err, nr)
		}
		browsed += len(nr.Results[0].References)
		cp = nr.Results[0].ContinuationPoint
	}
	if browsed != 16 {
		t.Fatalf("paged browse found %d tags, want 16", browsed)
	}

	// Paths resolve to the tags.
	var tres *ua.TranslateBrowsePathsToNodeIDsResponse
	err = c.Send(ctx, &ua.TranslateBrowsePathsToNodeIDsRequest{BrowsePaths: []*ua.BrowsePath{{
		StartingNode: ua.NewNumericNodeID(0, id.ObjectsFolder),
		RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			{ReferenceTypeID: ua.NewNumericNodeID(0, id.HierarchicalReferences), IncludeSubtypes: true, TargetName: &ua.QualifiedName{NamespaceIndex: 1, Name: "Sim"}},
			{ReferenceTypeID: ua.NewNumericNodeID(0, id.Organizes), TargetName: &ua.QualifiedName{NamespaceIndex: 1, Name: "Tags0000"}},
			{ReferenceTypeID: ua.NewNumericNodeID(0, id.Organizes), TargetName: &ua.QualifiedName{NamespaceIndex: 1, Name: "Counter0000"}},
		}},
	}}}, func(v ua.Response) error {
		tres, _ = v.(*ua.TranslateBrowsePathsToNodeIDsResponse)
		return nil
	})
	if err != nil || tres == nil || tres.Results[0].StatusCode != ua.StatusOK ||
		tres.Results[0].Targets[0].TargetID.NodeID.String() != p.Tags()[0].NodeID().String() {
		t.Fatalf("translate: %v, %+v", err, tres)
	}

	// Subscription ids never repeat, even after a delete (gopcua's server
	// reused len(map)+1).
	ids := map[uint32]bool{}
	var subs []*opcua.Subscription
	for range 3 {
		s, err := c.Subscribe(ctx, &opcua.SubscriptionParameters{Interval: 50 * time.Millisecond}, make(chan *opcua.PublishNotificationData, 1))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	subs[0].Cancel(ctx)
	s4, err := c.Subscribe(ctx, &opcua.SubscriptionParameters{Interval: 50 * time.Millisecond}, make(chan *opcua.PublishNotificationData, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(subs, s4, sub.Subscription) {
		if ids[s.SubscriptionID] {
			t.Fatalf("subscription id %d handed out twice", s.SubscriptionID)
		}
		ids[s.SubscriptionID] = true
	}
	subs[1].Cancel(ctx)
	subs[2].Cancel(ctx)
	s4.Cancel(ctx)

	// Publish requests of a session without subscriptions get
	// Bad_NoSubscription, which gopcua's client does not treat as a broken
	// channel: at once, or when the last subscription is deleted.
	raw := dial(t, p.A().Endpoint())
	publish := func() error {
		return raw.Send(ctx, &ua.PublishRequest{SubscriptionAcknowledgements: []*ua.SubscriptionAcknowledgement{}},
			func(ua.Response) error { return nil })
	}
	if err := publish(); !errors.Is(err, ua.StatusBadNoSubscription) {
		t.Fatalf("Publish without subscriptions: %v", err)
	}
	var cs *ua.CreateSubscriptionResponse
	// An interval of a minute: nothing answers the Publish before the delete.
	err = raw.Send(ctx, &ua.CreateSubscriptionRequest{RequestedPublishingInterval: 60000, PublishingEnabled: true},
		func(v ua.Response) error { cs, _ = v.(*ua.CreateSubscriptionResponse); return nil })
	if err != nil || cs == nil {
		t.Fatalf("raw CreateSubscription: %v", err)
	}
	queued := p.A().Stats().QueuedPublishes
	errc := make(chan error, 1)
	go func() { errc <- publish() }()
	for p.A().Stats().QueuedPublishes == queued {
		select {
		case err := <-errc:
			t.Fatalf("Publish answered before its subscription was deleted: %v", err)
		case <-time.After(5 * time.Millisecond): // poll until the server has queued it
		}
	}
	var ds *ua.DeleteSubscriptionsResponse
	err = raw.Send(ctx, &ua.DeleteSubscriptionsRequest{SubscriptionIDs: []uint32{cs.SubscriptionID, 4242}},
		func(v ua.Response) error { ds, _ = v.(*ua.DeleteSubscriptionsResponse); return nil })
	if err != nil || ds.Results[0] != ua.StatusOK || ds.Results[1] != ua.StatusBadSubscriptionIDInvalid {
		t.Fatalf("raw DeleteSubscriptions: %v, %+v", err, ds)
	}
	if err := <-errc; !errors.Is(err, ua.StatusBadNoSubscription) {
		t.Fatalf("queued Publish after its last subscription went: %v", err)
	}
	if raw.State() != opcua.Connected {
		t.Fatalf("raw client state %v", raw.State())
	}

	// TransferSubscriptions moves a subscription to the calling session
	// (gopcua's server answered Unsupported, which sent its client into a
	// reconnect).
	var tsr *ua.TransferSubscriptionsResponse
	err = raw.Send(ctx, &ua.TransferSubscriptionsRequest{SubscriptionIDs: []uint32{sub.SubscriptionID, 4242}},
		func(v ua.Response) error { tsr, _ = v.(*ua.TransferSubscriptionsResponse); return nil })
	if err != nil || tsr.Results[0].StatusCode != ua.StatusOK || tsr.Results[1].StatusCode != ua.StatusBadSubscriptionIDInvalid {
		t.Fatalf("TransferSubscriptions: %v, %+v", err, tsr)
	}
	// The old session hears about it on its Publish request.
	select {
	case st := <-sub.statuses:
		if st != ua.StatusGoodSubscriptionTransferred {
			t.Fatalf("status change %v after the transfer", st)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the old session was not told of the transfer")
	}
	var ds2 *ua.DeleteSubscriptionsResponse
	err = c.Send(ctx, &ua.DeleteSubscriptionsRequest{SubscriptionIDs: []uint32{sub.SubscriptionID}},
		func(v ua.Response) error { ds2, _ = v.(*ua.DeleteSubscriptionsResponse); return nil })
	if err != nil || ds2.Results[0] != ua.StatusBadSubscriptionIDInvalid {
		t.Fatalf("the old session still owns a transferred subscription: %v, %+v", err, ds2)
	}

	// A read whose answer exceeds one 64 KiB chunk gets
	// Bad_ResponseTooLarge (gopcua's server sent it, and the client dropped
	// the connection). The fault makes gopcua's client give up the
	// connection, so use a separate one.
	big := dial(t, p.A().Endpoint())
	nids := make([]*ua.NodeID, 3000)
	for i := range nids {
		nids[i] = nidServerArray
	}
	if _, err := big.tryRead(nids...); !errors.Is(err, ua.StatusBadResponseTooLarge) {
		t.Fatalf("oversized read: %v", err)
	}
	if got := c.level(); got != 140 {
		t.Fatalf("level %d after the bad requests", got)
	}
}

func TestOPCUAManySubscribeUnsubscribeCycles(t *testing.T) {
	p := startPair(t, WithTags(40), WithTagInterval(5*time.Millisecond))
	c := dial(t, p.A().Endpoint())
	ctx := ctx5s(t)
	var nids []*ua.NodeID
	for _, tg := range p.Tags()[:20] {
		nids = append(nids, tg.NodeID())
	}
	// gopcua's client hands notifications over with a blocking send, so
	// its publish loop stalls unless someone drains them.
	notifs := make(chan *opcua.PublishNotificationData, 64)
	data := make(chan struct{}, 1)
	stop, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-stop:
				return
			case n := <-notifs:
				if _, ok := n.Value.(*ua.DataChangeNotification); ok {
					select {
					case data <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	defer func() {
		close(stop)
		<-drained
	}()
	// gopcua's client pauses its publish loop when its last subscription
	// goes and resumes it on the next Subscribe, through two buffered
	// channels whose signals can be taken out of order, leaving the loop
	// paused with a live subscription. An anchor subscription keeps the
	// client clear of that; the server's own no-subscription paths are
	// tested with raw requests in TestOPCUAServicesAndBadRequests.
	anchor := c.subscribe(time.Second)
	anchor.monitor(1, nidServiceLevel)
	seen := map[uint32]bool{}
	for i := range 150 {
		sub, err := c.Subscribe(ctx, &opcua.SubscriptionParameters{Interval: 10 * time.Millisecond}, notifs)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if seen[sub.SubscriptionID] {
			t.Fatalf("cycle %d: subscription id %d reused", i, sub.SubscriptionID)
		}
		seen[sub.SubscriptionID] = true
		var reqs []*ua.MonitoredItemCreateRequest
		for j, n := range nids {
			reqs = append(reqs, opcua.NewMonitoredItemCreateRequestWithDefaults(n, ua.AttributeIDValue, uint32(j)))
		}
		if _, err := sub.Monitor(ctx, ua.TimestampsToReturnBoth, reqs...); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if i%10 == 0 {
			// Let data flow through some of them before cancelling.
			select {
			case <-data:
			default:
			}
			select {
			case <-data:
			case <-time.After(2 * time.Second):
				t.Fatalf("cycle %d: no data", i)
			}
		}
		if err := sub.Cancel(ctx); err != nil {
			t.Fatalf("cycle %d: cancel: %v", i, err)
		}
	}
	if st := p.A().Stats(); st.Subscriptions != 1 || st.MonitoredItems != 1 {
		t.Fatalf("left behind: %+v", st)
	}
	if got := c.level(); got != LevelPrimary {
		t.Fatalf("level %d", got)
	}
}

func TestOPCUAClientsVanishingMidPublish(t *testing.T) {
	p := startPair(t, WithTags(300), WithTagInterval(20*time.Millisecond))
	var nids []*ua.NodeID
	for _, tg := range p.Tags() {
		nids = append(nids, tg.NodeID())
	}
	faults := []func(*Server) int{(*Server).ResetConns, (*Server).DropConns}
	for i := range 12 {
		c := dial(t, p.A().Endpoint(), opcua.SessionTimeout(time.Second))
		sub := c.subscribe(10 * time.Millisecond)
		h := sub.monitor(1, nids...)
		sub.next(h[0], 2*time.Second)
		sub.next(h[0], 2*time.Second) // mid-stream
		if i%3 == 2 {
			// Freeze first so that the server's writes back up, then cut.
			p.A().Freeze()
			time.Sleep(30 * time.Millisecond) // let a backlog build; nothing waits on it
			p.A().Heal()
		}
		faults[i%2](p.A())
		c.waitState(opcua.Disconnected, 3*time.Second)
	}
	// The server keeps serving, and the abandoned sessions go when they
	// time out (1 s), taking their subscriptions with them.
	c := dial(t, p.A().Endpoint())
	sub := c.subscribe(10 * time.Millisecond)
	h := sub.monitor(1, nids[0])[0]
	sub.next(h, 2*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := p.A().Stats()
		if st.Sessions == 1 && st.Subscriptions == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("abandoned sessions did not time out: %+v", st)
		}
		sub.next(h, 2*time.Second) // paces the poll; the data must keep flowing
	}
}

func TestOPCUAThousandTagsAtTenHertz(t *testing.T) {
	const n = 1200
	p := startPair(t, WithTags(n), WithTagInterval(100*time.Millisecond))
	var nids []*ua.NodeID
	for _, tg := range p.Tags()[:n] {
		nids = append(nids, tg.NodeID())
	}
	// The pair on its own: the clock samples nothing, nobody subscribes.
	cpu0, wall0 := cpuTime(t), time.Now()
	time.Sleep(500 * time.Millisecond) // measuring an interval, not waiting for a condition
	idle := float64(cpuTime(t)-cpu0) / float64(time.Since(wall0))

	c := dial(t, p.A().Endpoint())
	// A 250 ms publishing interval carries about 3000 notifications (over
	// 100 KiB) per cycle: more than one 64 KiB chunk, so the server must
	// split it with MoreNotifications. A queue of 50 gives the in-process
	// client 5 s of slack on a loaded machine (2 busy cores and -race made
	// it fall 1 s behind), so a counter gap means the server lost data.
	sub := c.subscribeMeasured(250*time.Millisecond, true)
	handles := sub.monitor(50, nids...)
	counters := map[uint32]bool{}
	for i, h := range handles {
		if p.Tags()[i].Kind == TagCounter {
			counters[h] = true
		}
	}
	sub.next(handles[0], 5*time.Second)
	before := p.A().Stats()
	cpu0, wall0 = cpuTime(t), time.Now()
	last := map[uint32]int64{}
	total, gaps := 0, 0
	end := time.After(2 * time.Second)
collect:
	for {
		select {
		case nt := <-sub.ch:
			total++
			if !counters[nt.handle] {
				continue
			}
			k, _ := nt.dv.Value.Value().(int64)
			if prev, ok := last[nt.handle]; ok && k != prev+1 {
				gaps++
			}
			last[nt.handle] = k
		case <-end:
			break collect
		}
	}
	wall := time.Since(wall0)
	busy := float64(cpuTime(t)-cpu0) / float64(wall)
	after := p.A().Stats()
	published := after.Publishes - before.Publishes
	notified := after.Notifications - before.Notifications
	t.Logf("%d tags at 10 Hz: %d notifications in %v (%.0f/s) in %d PublishResponses; overflows %d",
		n, total, wall.Round(time.Millisecond), float64(total)/wall.Seconds(), published, after.Overflows)
	t.Logf("process CPU (servers and the gopcua client, -race=%v): idle pair %.1f%%, with the subscriber %.1f%% of one core",
		opcuaRaceEnabled, 100*idle, 100*busy)
	if gaps > 0 {
		t.Fatalf("%d counter gaps: updates were lost", gaps)
	}
	// Production is 12000/s; a client on an overloaded machine lags, and
	// the queues absorb it.
	if total < n*5 {
		t.Fatalf("only %d notifications in %v", total, wall)
	}
	// Each cycle has about 3000 notifications (over 100 KiB) due: every
	// response must still fit in the client's 64 KiB chunk, and the
	// largest should come close to it.
	if largest := sub.maxBytes.Load(); largest > 0xffff-uaMsgOverhead || largest < 0xffff/2 {
		t.Fatalf("largest DataChangeNotification %d bytes (%d notifications in %d responses)", largest, notified, published)
	} else {
		t.Logf("largest DataChangeNotification: %d bytes", largest)
	}
	if got := c.level(); got != LevelPrimary {
		t.Fatalf("level %d", got)
	}
}

// TestOPCUAStartCost bounds what an idle pair of 16 tags costs the process
// that runs it, since tests, the bench and the demo start many of them:
//
//   - Goroutines. An idle pair runs five: its clock, and per server the
//     accept loop and its proxy's accept loop. The ceiling, 8, leaves room
//     for one more per server but not for a connection that outlives the
//     readiness probe (four goroutines: proxy, two pipes and the server's
//     reader), nor for a goroutine per tag.
//   - Live heap. A server holds about 0.05 MiB (0.8 MiB with 1200 tags).
//     The ceiling, 1 MiB, is twenty times that, robust to -race and to
//     whatever the rest of the process allocates meanwhile, and still
//     catches buffers sized for the limits rather than for use (a 64 KiB
//     chunk per node of the address space, about 90 nodes, is 6 MiB), or
//     a server built the way gopcua's is, at about 14 MiB.
//   - Close gives every goroutine back: startPair's cleanup checks that.
//
// Time to start is logged, not bounded: on a loaded machine under -race it
// says more about the neighbours than about the pair.
func TestOPCUAStartCost(t *testing.T) {
	const (
		pairs                = 4
		goroutinesPerPair    = 5
		maxGoroutinesPerPair = 8
		maxHeapPerServer     = 1 << 20
	)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	start := time.Now()
	var ps []*Pair
	for range pairs {
		ps = append(ps, startPair(t))
	}
	per := time.Since(start) / pairs
	runtime.GC()
	runtime.ReadMemStats(&m1)
	heap := (int64(m1.HeapAlloc) - int64(m0.HeapAlloc)) / (2 * pairs)
	// The readiness probes' clients and connections end asynchronously
	// after Start returns: wait for the count to settle under the
	// ceiling, and fail if it never does.
	var g int
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g = (runtime.NumGoroutine() - g0) / pairs
		if g <= maxGoroutinesPerPair || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	t.Logf("StartPair (16 tags, both servers ready): %v per pair; %d goroutines per pair; heap %.3f MiB per server (-race=%v)",
		per.Round(time.Microsecond), g, float64(heap)/(1<<20), opcuaRaceEnabled)
	if g > maxGoroutinesPerPair {
		t.Errorf("an idle pair runs %d goroutines, want at most %d (%d expected)", g, maxGoroutinesPerPair, goroutinesPerPair)
	}
	if heap > maxHeapPerServer {
		t.Errorf("an idle server holds %.2f MiB of heap, want at most %.2f MiB", float64(heap)/(1<<20), float64(maxHeapPerServer)/(1<<20))
	}
	runtime.KeepAlive(ps)
}
