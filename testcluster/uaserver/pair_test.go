package uaserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
)

func TestOPCUAPairServesRedundancyNodes(t *testing.T) {
	p := startPair(t)
	if p.A().Endpoint() == p.B().Endpoint() {
		t.Fatal("both servers have one endpoint")
	}
	for i, s := range p.Servers() {
		if s.Proxy() == nil || "opc.tcp://"+s.Proxy().Addr() != s.Endpoint() {
			t.Fatalf("%s: endpoint %s does not go through its proxy", s.Name(), s.Endpoint())
		}
		c := dial(t, s.Endpoint())
		want := []byte{LevelPrimary, LevelHealthyFollower}[i]
		if got := c.level(); got != want {
			t.Errorf("%s: ServiceLevel %d, want %d", s.Name(), got, want)
		}
		res := c.read(nidServerArray, nidRedundancy, nidState)
		uris, _ := res[0].Value.Value().([]string)
		if !slices.Equal(uris, []string{s.ApplicationURI(), p.Server(1 - i).ApplicationURI()}) {
			t.Errorf("%s: ServerArray %v", s.Name(), uris)
		}
		if v, _ := res[1].Value.Value().(int32); ua.RedundancySupport(v) != ua.RedundancySupportWarm {
			t.Errorf("%s: RedundancySupport %v", s.Name(), res[1].Value.Value())
		}
		if v, _ := res[2].Value.Value().(int32); ua.ServerState(v) != ua.ServerStateRunning {
			t.Errorf("%s: State %v", s.Name(), res[2].Value.Value())
		}
		// CurrentTime ticks.
		t1, _ := c.read(nidCurrentTime)[0].Value.Value().(time.Time)
		deadline := time.Now().Add(2 * time.Second)
		for {
			t2, _ := c.read(nidCurrentTime)[0].Value.Value().(time.Time)
			if t2.After(t1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: CurrentTime stuck at %v", s.Name(), t1)
			}
		}
		// Discovery hands out the proxy's URL and the ApplicationUri.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		eps, err := opcua.GetEndpoints(ctx, s.Endpoint())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if len(eps) != 1 || eps[0].EndpointURL != s.Endpoint() || eps[0].Server.ApplicationURI != s.ApplicationURI() {
			t.Fatalf("%s: endpoints %+v", s.Name(), eps)
		}
	}
}

func TestOPCUAServiceLevelChangeReachesSubscriber(t *testing.T) {
	p := startPair(t)
	c := dial(t, p.A().Endpoint())
	const interval = 100 * time.Millisecond
	sub := c.subscribe(interval)
	h := sub.monitor(1, nidServiceLevel)[0]
	sub.waitValue(h, 2*time.Second, isLevel(LevelPrimary)) // the initial value
	var worst time.Duration
	for _, l := range []byte{LevelStandby, LevelPrimary, 180, 0, LevelHealthyFollower} {
		start := time.Now()
		p.A().SetLevel(l)
		n := sub.waitValue(h, 2*time.Second, isLevel(l))
		lat := n.at.Sub(start)
		worst = max(worst, lat)
		if n.dv.SourceTimestamp.Before(start.Add(-time.Millisecond)) || n.dv.Status != ua.StatusOK {
			t.Errorf("level %d: source timestamp %v before the change at %v, status %v", l, n.dv.SourceTimestamp, start, n.dv.Status)
		}
	}
	t.Logf("ServiceLevel change to subscriber, %v publishing interval: worst %v", interval, worst)
	// One publishing interval, plus slack for a loaded machine running -race.
	if worst > interval+100*time.Millisecond {
		t.Errorf("a ServiceLevel change took %v to arrive with a %v publishing interval", worst, interval)
	}
	p.A().Promote()
	p.A().Demote()
	if got := c.level(); got != LevelStandby {
		t.Fatalf("after Promote, Demote: level %d", got)
	}
}

// tagSeen is what one server said about a tag at one tick.
type tagSeen struct {
	value any
	src   time.Time
}

func TestOPCUATagsAreIdenticalOnBothServers(t *testing.T) {
	p := startPair(t, WithTags(12), WithTagInterval(50*time.Millisecond))
	tags := p.Tags()[:12]
	nids := make([]*ua.NodeID, len(tags))
	for i, tg := range tags {
		nids[i] = tg.NodeID()
	}
	const ticks = 15
	// seen[server][tag][tick]
	seen := make([][]map[uint64]tagSeen, 2)
	// Subscribe on both servers first so that they watch the same ticks.
	subs := make([]*testSub, 2)
	handleSets := make([][]uint32, 2)
	for si, s := range p.Servers() {
		c := dial(t, s.Endpoint())
		// Publishing faster than the process ticks, with a queue, so that
		// a counter must show every tick.
		subs[si] = c.subscribe(20 * time.Millisecond)
		handleSets[si] = subs[si].monitor(4, nids...)
	}
	for si, s := range p.Servers() {
		sub, handles := subs[si], handleSets[si]
		byHandle := map[uint32]int{}
		for i, h := range handles {
			byHandle[h] = i
		}
		var got []notification
		deadline := time.After(10 * time.Second)
		counters := 0
		for counters < ticks*3 {
			select {
			case n := <-sub.ch:
				got = append(got, n)
				if tags[byHandle[n.handle]].Kind == TagCounter {
					counters++
				}
			case <-deadline:
				t.Fatalf("%s: only %d counter notifications", s.Name(), counters)
			}
		}
		// Counters name the tick their source timestamp belongs to.
		tickAt := map[time.Time]uint64{}
		last := map[int]int64{}
		for _, n := range got {
			i := byHandle[n.handle]
			if tags[i].Kind != TagCounter {
				continue
			}
			k, _ := n.dv.Value.Value().(int64)
			if n.dv.SourceTimestamp.IsZero() || n.dv.Status != ua.StatusOK {
				t.Fatalf("%s %s: status %v source timestamp %v", s.Name(), tags[i].Name, n.dv.Status, n.dv.SourceTimestamp)
			}
			if prev, ok := last[i]; ok && k != prev+1 {
				t.Errorf("%s %s: counter went %d -> %d, an update was lost", s.Name(), tags[i].Name, prev, k)
			}
			last[i] = k
			tickAt[n.dv.SourceTimestamp] = uint64(k)
		}
		seen[si] = make([]map[uint64]tagSeen, len(tags))
		for i := range tags {
			seen[si][i] = map[uint64]tagSeen{}
		}
		for _, n := range got {
			i := byHandle[n.handle]
			k, ok := tickAt[n.dv.SourceTimestamp]
			if !ok {
				continue // the initial value of a tag, before its counter's first
			}
			v := n.dv.Value.Value()
			if want := tags[i].ValueAt(k); v != want {
				t.Errorf("%s %s at tick %d: %v, want %v", s.Name(), tags[i].Name, k, v, want)
			}
			seen[si][i][k] = tagSeen{v, n.dv.SourceTimestamp}
		}
	}
	common := 0
	for i, tg := range tags {
		for k, a := range seen[0][i] {
			b, ok := seen[1][i][k]
			if !ok {
				continue
			}
			common++
			if a.value != b.value || !a.src.Equal(b.src) {
				t.Errorf("%s at tick %d: A says %v@%v, B says %v@%v", tg.Name, k, a.value, a.src, b.value, b.src)
			}
		}
	}
	if common < ticks {
		t.Fatalf("only %d tag values seen on both servers", common)
	}
}

func TestOPCUAStandbyServesBadOutOfService(t *testing.T) {
	p := startPair(t, WithTagInterval(time.Hour)) // values stay put: only the status moves
	counter := p.Tags()[0].NodeID()
	b := dial(t, p.B().Endpoint())
	sub := b.subscribe(50 * time.Millisecond)
	h := sub.monitor(1, counter)[0]
	if n := sub.next(h, 5*time.Second); n.dv.Status != ua.StatusOK {
		t.Fatalf("B at %d: status %v", p.B().Level(), n.dv.Status)
	}
	p.B().Demote()
	n := sub.next(h, 5*time.Second)
	if n.dv.Status != ua.StatusBadOutOfService {
		t.Fatalf("B at 90: status %v, want Bad_OutOfService", n.dv.Status)
	}
	if n.dv.Value == nil || n.dv.Value.Value() == nil {
		t.Fatal("B at 90: Bad_OutOfService came without the value")
	}
	if dv := b.read(counter)[0]; dv.Status != ua.StatusBadOutOfService {
		t.Fatalf("read on B at 90: %v", dv.Status)
	}
	a := dial(t, p.A().Endpoint())
	if dv := a.read(counter)[0]; dv.Status != ua.StatusOK {
		t.Fatalf("read on A at 250: %v", dv.Status)
	}
	p.B().SetLevel(199)
	if dv := b.read(counter)[0]; dv.Status != ua.StatusBadOutOfService {
		t.Fatalf("read on B at 199: %v", dv.Status)
	}
	p.B().SetLevel(200)
	if n := sub.next(h, 5*time.Second); n.dv.Status != ua.StatusOK {
		t.Fatalf("B back at 200: status %v", n.dv.Status)
	}
	// ServiceLevel itself is always Good.
	p.B().SetLevel(0)
	if dv := b.read(nidServiceLevel)[0]; dv.Status != ua.StatusOK {
		t.Fatalf("ServiceLevel at 0: %v", dv.Status)
	}
}

func TestOPCUAWritesLandOnBothServers(t *testing.T) {
	p := startPair(t)
	sp := p.Setpoints()[1]
	a, b := dial(t, p.A().Endpoint()), dial(t, p.B().Endpoint())
	sub := b.subscribe(50 * time.Millisecond)
	h := sub.monitor(1, sp.NodeID())[0]
	sub.next(h, 2*time.Second) // initial 0
	if code := a.write(sp.NodeID(), 42.5); code != ua.StatusOK {
		t.Fatalf("write on A: %v", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, err := p.WaitWrites(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if w := ws[0]; w.Server != "A" || w.Tag != sp.Name || w.Value != 42.5 || w.At.IsZero() {
		t.Fatalf("write recorded as %+v", w)
	}
	if v, ok := p.Setpoint(sp.Name); !ok || v != 42.5 {
		t.Fatalf("Setpoint(%s) = %v, %v", sp.Name, v, ok)
	}
	if v, _ := b.read(sp.NodeID())[0].Value.Value().(float64); v != 42.5 {
		t.Fatalf("B reads %v after the write on A", v)
	}
	if n := sub.next(h, 2*time.Second); n.dv.Value.Value() != 42.5 {
		t.Fatalf("B's subscriber got %v", n.dv.Value.Value())
	}
	// What a server refuses, per operation, without breaking the session.
	for _, tc := range []struct {
		name string
		nid  *ua.NodeID
		v    any
		want ua.StatusCode
	}{
		{"counter", p.Tags()[0].NodeID(), 1.0, ua.StatusBadNotWritable},
		{"int32 into a Double", sp.NodeID(), int32(3), ua.StatusBadTypeMismatch},
		{"unknown namespace", ua.NewStringNodeID(42, "nope"), 1.0, ua.StatusBadNodeIDUnknown},
		{"ServiceLevel", nidServiceLevel, byte(0), ua.StatusBadNotWritable},
	} {
		if code := a.write(tc.nid, tc.v); code != tc.want {
			t.Errorf("write %s: %v, want %v", tc.name, code, tc.want)
		}
	}
	p.B().Demote()
	if code := b.write(sp.NodeID(), 7.0); code != ua.StatusBadOutOfService {
		t.Errorf("write on a standby: %v, want Bad_OutOfService", code)
	}
	if n := len(p.Writes()); n != 1 {
		t.Fatalf("%d writes recorded, want 1", n)
	}
	// NodesWritten counts what arrived, the refused writes too.
	if wa, wb := p.A().Stats().NodesWritten, p.B().Stats().NodesWritten; wa != 5 || wb != 1 {
		t.Fatalf("NodesWritten: A %d, B %d; want 5 and 1", wa, wb)
	}
	if got := a.level(); got != LevelPrimary {
		t.Fatalf("A after refused writes: level %d", got)
	}
}

// TestOPCUALevelFuncComputesFromHealth: with a LevelFunc set, the level
// follows every UpdateHealth and clients read it; with none, UpdateHealth
// records the inputs and leaves the level alone.
func TestOPCUALevelFuncComputesFromHealth(t *testing.T) {
	p := startPair(t)
	s := p.B()
	s.SetLevelFunc(Tiers)
	if s.Level() != TierHealthyFollower {
		t.Fatalf("B as a healthy follower: %d", s.Level())
	}
	if l := s.UpdateHealth(func(h *Health) { h.Primary = true }); l != TierHealthyPrimary {
		t.Fatalf("B as primary: %d", l)
	}
	if l := s.UpdateHealth(func(h *Health) { h.Stale, h.StoreReachable = true, false }); l != TierCriticallyDegraded {
		t.Fatalf("B stale without its store: %d", l)
	}
	c := dial(t, s.Endpoint())
	if got := c.level(); got != TierCriticallyDegraded {
		t.Fatalf("B serves %d", got)
	}
	s.SetLevelFunc(nil)
	s.UpdateHealth(func(h *Health) { h.MemberUp = false })
	if s.Level() != TierCriticallyDegraded {
		t.Fatalf("manual again, but the level moved to %d", s.Level())
	}
	if h := s.Health(); h.MemberUp || !h.Stale || !h.Primary {
		t.Fatalf("health %+v", h)
	}
}

func TestOPCUALevelEncodingFaults(t *testing.T) {
	p := startPair(t)
	s := p.B()
	c := dial(t, s.Endpoint())
	sub := c.subscribe(20 * time.Millisecond)
	h := sub.monitor(1, nidServiceLevel)[0]
	sub.waitValue(h, 2*time.Second, isLevel(LevelHealthyFollower))
	for _, tc := range []struct {
		enc  LevelEncoding
		want func(*ua.DataValue) bool
	}{
		{LevelAsInt32, func(dv *ua.DataValue) bool {
			v, ok := dv.Value.Value().(int32)
			return ok && v == int32(LevelHealthyFollower) && dv.Status == ua.StatusOK
		}},
		{LevelNoValue, func(dv *ua.DataValue) bool {
			return dv.Status == ua.StatusOK && (dv.Value == nil || dv.Value.Value() == nil)
		}},
		{LevelBadStatus, func(dv *ua.DataValue) bool { return dv.Status == ua.StatusBadWaitingForInitialData }},
		{LevelAsByte, isLevel(LevelHealthyFollower)},
	} {
		s.SetLevelEncoding(tc.enc)
		if dv := c.read(nidServiceLevel)[0]; !tc.want(dv) {
			t.Errorf("encoding %d: read %+v", tc.enc, dv)
		}
		sub.waitValue(h, 2*time.Second, tc.want) // subscribers get the change
	}
	// A restart keeps the encoding, and readiness does not wait for a Byte.
	s.SetLevelEncoding(LevelAsInt32)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Restart(ctx, LevelPrimary); err != nil {
		t.Fatal(err)
	}
	if v, ok := dial(t, s.Endpoint()).read(nidServiceLevel)[0].Value.Value().(int32); !ok || v != int32(LevelPrimary) {
		t.Fatalf("after restart: %v", v)
	}
}

var (
	_ = errors.Is
	_ = fmt.Sprint
	_ = net.Dial
	_ sync.Mutex
	_ = syscall.ECONNREFUSED
)

// A tag's source time never goes back, even when the clock a tick is
// given does: a ticker's channel values can (golang/go#80893), and a
// client that orders a tag's values by source time would see it go back.
func TestOPCUATickSourceTimeNeverGoesBack(t *testing.T) {
	p := startPair(t, WithTags(4), WithTagInterval(time.Hour)) // no tick but the test's
	counter := p.A().tagValue(0)
	last := counter()
	at := last.SourceTimestamp.Add(10 * time.Millisecond)
	for i, now := range []time.Time{at, at.Add(-5 * time.Millisecond), at, at.Add(time.Millisecond)} {
		p.advance(now)
		dv := counter()
		if got, want := dv.Value.Value(), int64(i+1); got != want {
			t.Fatalf("tick %d: counter %v, want %d", i+1, got, want)
		}
		if !dv.SourceTimestamp.After(last.SourceTimestamp) {
			t.Errorf("tick %d (clock %s): source time %s, not after the last tick's %s", i+1,
				now.Format("15:04:05.000000"), dv.SourceTimestamp.Format("15:04:05.000000"),
				last.SourceTimestamp.Format("15:04:05.000000"))
		}
		last = dv
	}
}
