package mxsim

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestMxStartOptions: Start refuses a gateway without data, and a value
// no gateway could use with an error that names the option. (An option of
// another package's servers no longer compiles.)
func TestMxStartOptions(t *testing.T) {
	if _, err := Start(nil); err == nil {
		t.Fatal("a gateway without data started")
	}
	if _, err := Start(NewData(), nil, WithReadyTimeout(0)); err == nil || !strings.HasPrefix(err.Error(), "mxsim: WithReadyTimeout(") {
		t.Errorf("Start(WithReadyTimeout(0)): %v, want an error naming it", err)
	}
}

func TestMxOpenSession(t *testing.T) {
	g := startMx(t, NewData(), 1)[0]
	c := dialMx(t, g.Addr())
	ctx := ctx5s(t)

	s := openMx(t, c, 0, 0)
	_, port, _ := strings.Cut(g.Addr(), ":")
	if r := s.open; r.GetDefaultCommandTimeout().AsDuration() != DefaultCommandTimeout ||
		!slices.Equal(r.GetCapabilities(), DefaultCapabilities()) || r.GetGatewayId() != "mxgw-"+port ||
		r.GetGatewayProtocolVersion() != 1 || r.GetHeartbeatInterval().AsDuration() != time.Second || r.GetSessionId() == "" {
		t.Fatalf("default session: %v", r)
	}
	if len(DefaultCapabilities()) != 13 || !slices.Contains(DefaultCapabilities(), "bulk-subscribe-supervisory") {
		t.Fatalf("default capabilities %v", DefaultCapabilities())
	}
	// Today's gateway: nine, none of apbridge's own.
	if base := BaseCapabilities(); len(base) != 9 || slices.ContainsFunc(base, func(c string) bool {
		return c == CapBulkSubscribeSupervisory || c == CapEventResume || c == CapPing || c == CapHeartbeat
	}) {
		t.Fatalf("base capabilities %v", base)
	}
	if r := openMx(t, c, 0, 2*time.Second).open; r.GetDefaultCommandTimeout().AsDuration() != 2*time.Second {
		t.Fatalf("command_timeout 2s echoed as %v", r.GetDefaultCommandTimeout().AsDuration())
	}
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := c.OpenSession(ctx, &mxpb.OpenSessionRequest{CommandTimeout: durationpb.New(d)})
		wantCode(t, "command_timeout "+d.String(), err, codes.InvalidArgument)
	}

	g.SetCapabilities([]string{"unary-invoke"})
	g.SetName("gw-test")
	g.SetDefaultCommandTimeout(5 * time.Second)
	g.SetHeartbeatInterval(0)
	r := openMx(t, c, 3, 0).open
	if !slices.Equal(r.GetCapabilities(), []string{"unary-invoke"}) || r.GetGatewayId() != "gw-test" ||
		r.GetDefaultCommandTimeout().AsDuration() != 5*time.Second || r.GetHeartbeatInterval().AsDuration() != 0 {
		t.Fatalf("reconfigured session: %v", r)
	}
	if n := g.Stats().Sessions; n != 3 {
		t.Fatalf("%d sessions open, want 3", n)
	}

	_, err := c.Invoke(ctx, &mxpb.MxCommandRequest{SessionId: "nope", Command: pingCmd()})
	wantCode(t, "Invoke on an unknown session", err, codes.NotFound)
	_, err = s.invoke(&mxpb.MxCommand{})
	wantCode(t, "an empty command", err, codes.InvalidArgument)
	if _, err := c.CloseSession(ctx, &mxpb.CloseSessionRequest{SessionId: s.id}); err != nil {
		t.Fatal(err)
	}
	_, err = s.invoke(pingCmd())
	wantCode(t, "Invoke on a closed session", err, codes.NotFound)
	_, err = c.CloseSession(ctx, &mxpb.CloseSessionRequest{SessionId: s.id})
	wantCode(t, "closing it again", err, codes.NotFound)
	st, err := c.StreamEvents(ctx, &mxpb.StreamEventsRequest{SessionId: s.id})
	if err == nil {
		_, err = st.Recv()
	}
	wantCode(t, "events of a closed session", err, codes.NotFound)
	if n := g.Stats().Sessions; n != 2 {
		t.Fatalf("%d sessions open, want 2", n)
	}
}

func TestMxOneCommandAtATime(t *testing.T) {
	g := startMx(t, NewData(), 1)[0]
	s := openMx(t, dialMx(t, g.Addr()), 0, 0)
	const n, latency = 16, 10 * time.Millisecond
	g.SetCommandLatency(latency)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			if _, err := s.invoke(pingCmd()); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if d := time.Since(start); d < n*latency {
		t.Errorf("%d commands of %v each took %v: they overlapped", n, latency, d)
	}
	st := g.Stats()
	if st.MaxConcurrent != 1 || st.CommandsByKind["Ping"] != n || st.Commands != n+1 || st.MaxPending < 2 {
		t.Fatalf("stats %+v", st)
	}
	g.ResetStats()
	if st := g.Stats(); st.Commands != 0 || st.MaxPending != 0 || len(st.CommandsByKind) != 0 || st.Sessions != 1 {
		t.Fatalf("after ResetStats: %+v", st)
	}
}

func TestMxPendingLimit(t *testing.T) {
	g := startMx(t, NewData(), 1)[0]
	s := openMx(t, dialMx(t, g.Addr()), 0, 0)
	g.SetCommandLatency(time.Hour) // a wedged worker
	var wg sync.WaitGroup
	errs := make(chan error, MaxPending)
	for range MaxPending {
		wg.Go(func() {
			if _, err := s.invoke(pingCmd()); err != nil {
				errs <- err
			}
		})
	}
	waitMx(t, 5*time.Second, "128 commands pending", func() bool { return g.Stats().MaxPending == MaxPending })
	_, err := s.invoke(pingCmd())
	wantCode(t, "the 129th command", err, codes.ResourceExhausted)
	g.SetCommandLatency(0)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a pending command: %v", err)
	}
	if st := g.Stats(); st.Refused != 1 || st.CommandsByKind["Ping"] != MaxPending || st.MaxPending != MaxPending {
		t.Fatalf("stats %+v", st)
	}
	s.must(pingCmd()) // room again
}

func TestMxCommandTimeout(t *testing.T) {
	data := NewData()
	data.Define("Tank.Level", float64(1))
	g := startMx(t, data, 1)[0]
	s := openMx(t, dialMx(t, g.Addr()), 0, 150*time.Millisecond)
	h := s.handle(true, "Tank.Level")
	started := make(chan string, 8)
	g.OnCommand(func(_, kind string) { started <- kind })
	g.SetCommandLatency(time.Hour)

	// A started command runs to completion though its caller timed out;
	// one queued behind it whose caller gave up never runs.
	first := make(chan error, 1)
	go func() { _, err := s.invoke(writeCmd(s.server, h, float64(5), 0)); first <- err }()
	if k := <-started; k != "Write" {
		t.Fatalf("the worker started a %s", k)
	}
	_, err := s.invoke(writeCmd(s.server, h, float64(7), 0))
	wantCode(t, "a queued write", err, codes.DeadlineExceeded)
	wantCode(t, "the running write", <-first, codes.DeadlineExceeded)

	if st := g.Stats(); st.DeadlineExceeded != 2 {
		t.Fatalf("%d deadlines exceeded, want 2", st.DeadlineExceeded)
	}

	// A client that cancels gives up too.
	g.ResetStats()
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() { _, err := s.invokeCtx(ctx, writeCmd(s.server, h, float64(9), 0)); cancelled <- err }()
	waitMx(t, 5*time.Second, "the third write queued", func() bool { return g.Stats().MaxPending == 3 })
	cancel()
	wantCode(t, "a cancelled write", <-cancelled, codes.Canceled)
	// The client knows at once, the gateway when the cancel arrives.
	waitMx(t, 5*time.Second, "the gateway to see the cancel", func() bool { return g.Stats().Cancelled == 1 })

	g.SetCommandLatency(0)
	waitMx(t, 5*time.Second, "the worker to drain", func() bool {
		st := g.Stats()
		return st.Dropped == 2 && st.CommandsByKind["Write"] == 1
	})
	if v, _, _, _ := data.Get("Tank.Level"); v != float64(5) {
		t.Fatalf("Tank.Level = %v, want 5: the started write only", v)
	}
	select {
	case k := <-started:
		t.Fatalf("the worker started a %s after the first write", k)
	default:
	}
	g.OnCommand(nil)
	s.must(pingCmd())
	if st := g.Stats(); st.DeadlineExceeded != 0 || st.MaxConcurrent != 1 {
		t.Fatalf("stats after reset %+v", st)
	}
}

func TestMxSubscribeBulkSupervisory(t *testing.T) {
	data := NewData()
	data.Define("Pump.Speed", float64(10))
	data.Define("Pump.Run", true)
	gs := startMx(t, data, 2)
	cur, old := gs[0], gs[1]
	old.SetCapabilities(slices.DeleteFunc(DefaultCapabilities(), func(c string) bool { return c == CapBulkSubscribeSupervisory }))

	// A current gateway honours supervisory: writes work.
	s := openMx(t, dialMx(t, cur.Addr()), 0, 0)
	r := s.subscribe(true, "Pump.Speed", "Nope.Attr", "Pump.Run")
	if len(r) != 3 || r[0].GetItemHandle() <= 0 || r[2].GetItemHandle() <= 0 || r[0].GetItemHandle() == r[2].GetItemHandle() ||
		r[1].GetStatus().GetCode() != mxpb.MxStatusCode_MX_STATUS_CODE_UNKNOWN_ITEM ||
		!strings.Contains(r[1].GetStatus().GetMessage(), "Nope.Attr") || r[1].GetTagAddress() != "Nope.Attr" {
		t.Fatalf("results %v", r)
	}
	if again := s.subscribe(true, "Pump.Speed"); again[0].GetItemHandle() != r[0].GetItemHandle() {
		t.Fatalf("Pump.Speed again got handle %d, first %d", again[0].GetItemHandle(), r[0].GetItemHandle())
	}
	if c := s.write(r[0].GetItemHandle(), float64(12.5), 0); c != mxpb.MxStatusCode_MX_STATUS_CODE_OK {
		t.Fatalf("write on a current gateway: %v", c)
	}
	if v, q, _, _ := data.Get("Pump.Speed"); v != 12.5 || q != QualityGood {
		t.Fatalf("Pump.Speed = %v (%d)", v, q)
	}
	if st := cur.Stats(); st.SupervisoryBulk != 2 || st.CommandsByKind["SubscribeBulk"] != 2 || st.Advised != 2 {
		t.Fatalf("current gateway stats %+v", st)
	}

	// An old gateway ignores the flag: a plain advise, writes refused,
	// until the item is advised supervisory one by one.
	o := openMx(t, dialMx(t, old.Addr()), 0, 0)
	h := o.handle(true, "Pump.Speed")
	if c := o.write(h, float64(1), 0); c != mxpb.MxStatusCode_MX_STATUS_CODE_WRITE_REFUSED {
		t.Fatalf("write after an ignored supervisory flag: %v", c)
	}
	o.must(&mxpb.MxCommand{Command: &mxpb.MxCommand_AdviseSupervisory{AdviseSupervisory: &mxpb.AdviseSupervisoryCommand{ServerHandle: o.server, ItemHandle: h}}})
	if c := o.write(h, float64(1), 0); c != mxpb.MxStatusCode_MX_STATUS_CODE_OK {
		t.Fatalf("write after AdviseSupervisory: %v", c)
	}
	if st := old.Stats(); st.SupervisoryBulk != 0 || st.CommandsByKind["AdviseSupervisory"] != 1 {
		t.Fatalf("old gateway stats %+v", st)
	}
}

func TestMxWriteRules(t *testing.T) {
	data := NewData()
	data.Define("Valve.Open", false)
	data.Define("Valve.Pos", int32(0))
	g := startMx(t, data, 1)[0]
	c := dialMx(t, g.Addr())
	const (
		ok       = mxpb.MxStatusCode_MX_STATUS_CODE_OK
		refused  = mxpb.MxStatusCode_MX_STATUS_CODE_WRITE_REFUSED
		badType  = mxpb.MxStatusCode_MX_STATUS_CODE_WRONG_TYPE
		badItem  = mxpb.MxStatusCode_MX_STATUS_CODE_INVALID_HANDLE
		notRegd  = mxpb.MxStatusCode_MX_STATUS_CODE_NOT_REGISTERED
		unknownI = mxpb.MxStatusCode_MX_STATUS_CODE_UNKNOWN_ITEM
	)

	// A supervisory session (user 0).
	s := openMx(t, c, 0, 0)
	r := s.must(&mxpb.MxCommand{Command: &mxpb.MxCommand_AddItemBulk{AddItemBulk: &mxpb.AddItemBulkCommand{
		ServerHandle: s.server, TagAddresses: []string{"Valve.Open", "Valve.Pos", "Valve.Gone"}}}}).GetItems().GetResults()
	if len(r) != 3 || r[2].GetStatus().GetCode() != unknownI {
		t.Fatalf("AddItemBulk: %v", r)
	}
	open, pos := r[0].GetItemHandle(), r[1].GetItemHandle()
	advise := func(sup bool, h int32) *mxpb.MxCommand {
		if sup {
			return &mxpb.MxCommand{Command: &mxpb.MxCommand_AdviseSupervisory{AdviseSupervisory: &mxpb.AdviseSupervisoryCommand{ServerHandle: s.server, ItemHandle: h}}}
		}
		return &mxpb.MxCommand{Command: &mxpb.MxCommand_Advise{Advise: &mxpb.AdviseCommand{ServerHandle: s.server, ItemHandle: h}}}
	}
	steps := []struct {
		what string
		do   func() mxpb.MxStatusCode
		want mxpb.MxStatusCode
	}{
		{"write before advise", func() mxpb.MxStatusCode { return s.write(open, true, 0) }, refused},
		{"plain advise", func() mxpb.MxStatusCode { s.must(advise(false, open)); return s.write(open, true, 0) }, refused},
		{"supervisory advise", func() mxpb.MxStatusCode { s.must(advise(true, open)); return s.write(open, true, 0) }, ok},
		{"as user 5", func() mxpb.MxStatusCode { return s.write(open, false, 5) }, refused},
		{"an int64 to a bool", func() mxpb.MxStatusCode { return s.write(open, int64(1), 0) }, badType},
		{"no value", func() mxpb.MxStatusCode { return s.write(open, nil, 0) }, badType},
		{"an unknown item", func() mxpb.MxStatusCode { return s.write(99, true, 0) }, badItem},
		{"after UnAdvise", func() mxpb.MxStatusCode {
			s.must(&mxpb.MxCommand{Command: &mxpb.MxCommand_UnAdvise{UnAdvise: &mxpb.UnAdviseCommand{ServerHandle: s.server, ItemHandle: open}}})
			return s.write(open, true, 0)
		}, refused},
	}
	for _, st := range steps {
		if got := st.do(); got != st.want {
			t.Fatalf("%s: %v, want %v", st.what, got, st.want)
		}
	}
	if v, _, _, _ := data.Get("Valve.Open"); v != true {
		t.Fatalf("Valve.Open = %v after one good write of true", v)
	}
	rep, err := s.invoke(writeCmd(s.server+100, open, true, 0))
	if err != nil || rep.GetStatus().GetCode() != notRegd || rep.GetWrite().GetStatus().GetCode() != notRegd {
		t.Fatalf("write on a wrong server handle: %v %v", rep, err)
	}
	if rep, _ := s.invoke(advise(false, 99)); rep.GetStatus().GetCode() != badItem {
		t.Fatalf("advise of an unknown item: %v", rep)
	}
	read := func(hs ...int32) *mxpb.MxCommandReply {
		rep, err := s.invoke(&mxpb.MxCommand{Command: &mxpb.MxCommand_Read{Read: &mxpb.ReadCommand{ServerHandle: s.server, ItemHandles: hs}}})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	vals := read(open, pos).GetRead().GetValues()
	if len(vals) != 2 || !vals[0].GetValue().GetBoolValue() || vals[0].GetQuality() != QualityGood ||
		vals[1].GetValue().GetKind() == nil || vals[1].GetTimestamp().AsTime().IsZero() {
		t.Fatalf("Read: %v", vals)
	}
	if rep := read(open, 99); rep.GetStatus().GetCode() != badItem {
		t.Fatalf("Read of an unknown handle: %v", rep.GetStatus())
	}
	s.must(&mxpb.MxCommand{Command: &mxpb.MxCommand_RemoveItem{RemoveItem: &mxpb.RemoveItemCommand{ServerHandle: s.server, ItemHandle: open}}})
	if rep, _ := s.invoke(advise(true, open)); rep.GetStatus().GetCode() != badItem {
		t.Fatalf("advise of a removed item: %v", rep.GetStatus())
	}

	// A session with a write user: plain advises, its own user only.
	u := openMx(t, c, 7, 0)
	h := u.handle(false, "Valve.Pos")
	for user, want := range map[int32]mxpb.MxStatusCode{7: ok, 8: refused, 0: refused} {
		if got := u.write(h, int32(40+user), user); got != want {
			t.Fatalf("user-7 session writing as %d: %v, want %v", user, got, want)
		}
	}
	if v, _, _, _ := data.Get("Valve.Pos"); v != int32(47) {
		t.Fatalf("Valve.Pos = %v, want 47", v)
	}

	// Before Register, nothing is registered.
	fresh, err := c.OpenSession(ctx5s(t), &mxpb.OpenSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f := &mxSess{t: t, c: c, id: fresh.GetSessionId()}
	if rep, _ := f.invoke(subscribeCmd(1, false, "Valve.Pos")); rep.GetStatus().GetCode() != notRegd {
		t.Fatalf("SubscribeBulk before Register: %v", rep.GetStatus())
	}
	if st := g.Stats(); st.Advised != 1 {
		t.Fatalf("%d items advised, want 1 (Valve.Pos on the user-7 session)", st.Advised)
	}
}

func TestMxEvents(t *testing.T) {
	data := NewData()
	data.Define("Tank.Level", float64(1.5))
	data.Define("Tank.Temp", float32(20))
	g := startMx(t, data, 1)[0]
	g.SetHeartbeatInterval(50 * time.Millisecond)
	s := openMx(t, dialMx(t, g.Addr()), 0, 0)
	// Advised before anyone streams: the initial value waits in the queue.
	h := s.handle(true, "Tank.Level")
	ev := s.events()

	var seq uint64
	next := func() *mxpb.MxEvent {
		t.Helper()
		e := ev.next(t, 5*time.Second)
		seq++
		if e.GetSessionId() != s.id || e.GetWorkerSequence() != seq {
			t.Fatalf("event %v: want session %s, sequence %d", e, s.id, seq)
		}
		return e
	}
	change := func(want any, quality int32) {
		t.Helper()
		dc := next().GetOnDataChange()
		if v, _ := fromMxValue(dc.GetValue()); v != want || dc.GetQuality() != quality ||
			dc.GetItemHandle() != h || dc.GetServerHandle() != s.server || dc.GetTimestamp().AsTime().IsZero() {
			t.Fatalf("OnDataChange %v, want %v (%d)", dc, want, quality)
		}
	}
	change(1.5, QualityGood)
	data.Set("Tank.Level", 2.5, QualityGood)
	change(2.5, QualityGood)
	data.Set("Tank.Level", 2.5, 0)
	change(2.5, 0)
	data.Set("Tank.Temp", float32(21), QualityGood) // not advised: no event

	// Idle: a heartbeat, in the same sequence.
	if hb := next().GetHeartbeat(); hb == nil || hb.GetAt().AsTime().IsZero() {
		t.Fatal("no heartbeat on an idle stream")
	}

	second, err := s.c.StreamEvents(ctx5s(t), &mxpb.StreamEventsRequest{SessionId: s.id})
	if err == nil {
		_, err = second.Recv()
	}
	wantCode(t, "a second subscriber", err, codes.FailedPrecondition)

	// AdviseItemBulk: plain advises, each with its initial value.
	add := s.must(&mxpb.MxCommand{Command: &mxpb.MxCommand_AddItemBulk{AddItemBulk: &mxpb.AddItemBulkCommand{
		ServerHandle: s.server, TagAddresses: []string{"Tank.Temp"}}}}).GetItems().GetResults()
	r := s.must(&mxpb.MxCommand{Command: &mxpb.MxCommand_AdviseItemBulk{AdviseItemBulk: &mxpb.AdviseItemBulkCommand{
		ServerHandle: s.server, ItemHandles: []int32{add[0].GetItemHandle(), 99}}}}).GetItems().GetResults()
	if len(r) != 2 || r[0].GetStatus().GetCode() != mxpb.MxStatusCode_MX_STATUS_CODE_OK || r[0].GetTagAddress() != "Tank.Temp" ||
		r[1].GetStatus().GetCode() != mxpb.MxStatusCode_MX_STATUS_CODE_INVALID_HANDLE {
		t.Fatalf("AdviseItemBulk: %v", r)
	}
	for {
		e := next()
		if e.GetHeartbeat() != nil {
			continue
		}
		if dc := e.GetOnDataChange(); dc.GetItemHandle() != add[0].GetItemHandle() || dc.GetValue().GetFloatValue() != 21 {
			t.Fatalf("after AdviseItemBulk: %v", e)
		}
		break
	}
}

func TestMxTwoGatewaysOneData(t *testing.T) {
	data := NewData()
	data.Define("Line.Setpoint", float64(0))
	stop := data.RunCounters("Line", 3, 5*time.Millisecond)
	defer stop()
	gs := startMx(t, data, 2)
	g1, g2 := gs[0], gs[1]
	s1 := openMx(t, dialMx(t, g1.Addr()), 0, 0)
	s2 := openMx(t, dialMx(t, g2.Addr()), 0, 0)
	addrs := []string{"Line0.Value", "Line1.Value", "Line2.Value", "Line.Setpoint"}
	var hs [2][]int32
	for i, s := range []*mxSess{s1, s2} {
		for _, r := range s.subscribe(true, addrs...) {
			hs[i] = append(hs[i], r.GetItemHandle())
		}
	}
	e1, e2 := s1.events(), s2.events()

	// Both see the counters climb.
	for i, e := range []*mxEvents{e1, e2} {
		last := int64(-1)
		for last < 3 {
			if dc := e.next(t, 5*time.Second).GetOnDataChange(); dc.GetItemHandle() == hs[i][0] {
				if v := dc.GetValue().GetInt64Value(); v < last {
					t.Fatalf("counter went back from %d to %d", last, v)
				} else {
					last = v
				}
			}
		}
	}
	// One tick: one timestamp for all the counters.
	vals := s1.must(&mxpb.MxCommand{Command: &mxpb.MxCommand_Read{Read: &mxpb.ReadCommand{ServerHandle: s1.server, ItemHandles: hs[0][:3]}}}).GetRead().GetValues()
	if len(vals) != 3 || !vals[0].GetTimestamp().AsTime().Equal(vals[2].GetTimestamp().AsTime()) {
		t.Fatalf("one tick, several timestamps: %v", vals)
	}
	stop()
	stop() // a second stop does nothing

	// A write through one gateway reaches the other's session.
	if c := s1.write(hs[0][3], 42.0, 0); c != mxpb.MxStatusCode_MX_STATUS_CODE_OK {
		t.Fatalf("write: %v", c)
	}
	for {
		if dc := e2.next(t, 5*time.Second).GetOnDataChange(); dc.GetItemHandle() == hs[1][3] && dc.GetValue().GetDoubleValue() == 42 {
			break
		}
	}
	v1, _, at1, _ := data.Get("Line0.Value")
	if v1.(int64) < 3 || at1.IsZero() {
		t.Fatalf("Line0.Value = %v at %v", v1, at1)
	}
	if _, _, _, ok := data.Get("Line9.Value"); ok {
		t.Fatal("RunCounters defined more than 3 items")
	}
}
