package opcuasource_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// opcuaEnv is a relay of a Warm OPC UA pair onto the embedded cluster.
type opcuaEnv struct {
	cl   *natstest.Cluster
	pair *uaserver.Pair
	conn *apconn.Conn
	src  *opcuasource.Source
	b    *bridge.Bridge
	nc   *nats.Conn

	mu      sync.Mutex
	updates map[string][]wire.Update
	refresh int
	// lastSrc and backwards: a data change older in source time than its
	// tag's last one (a snapshot may repeat an older value).
	lastSrc   map[string]time.Time
	backwards int
}

func startOPCUAEnv(t *testing.T, pairOpts ...uaserver.Option) *opcuaEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := &opcuaEnv{updates: map[string][]wire.Update{}, lastSrc: map[string]time.Time{}}
	e.cl, e.conn = testutil.ClusterConn(t)
	var err error
	if e.pair, err = uaserver.StartPair(ctx, pairOpts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pair.Close)
	if e.nc, err = nats.Connect(e.cl.Node(2).URL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	e.nc.Subscribe("apbridge.opc1.>", func(m *nats.Msg) {
		u, err := wire.DecodeJSON(m.Data)
		if err != nil {
			return
		}
		e.mu.Lock()
		e.updates[u.Tag] = append(e.updates[u.Tag], u)
		if m.Header.Get(wire.HeaderRefresh) != "true" && u.SourceTime.Before(e.lastSrc[u.Tag]) {
			e.backwards++
		}
		if u.SourceTime.After(e.lastSrc[u.Tag]) {
			e.lastSrc[u.Tag] = u.SourceTime
		}
		e.mu.Unlock()
	})
	e.nc.Subscribe("apbridge.events.opc1", func(m *nats.Msg) {
		if strings.Contains(string(m.Data), "refresh-start") {
			e.mu.Lock()
			e.refresh++
			e.mu.Unlock()
		}
	})
	e.nc.Flush()
	cfg := uaclient.PairConfig{Endpoints: e.pair.Endpoints()}
	if e.src, err = opcuasource.New("opc1", cfg); err != nil {
		t.Fatal(err)
	}
	if e.b, err = bridge.New(e.conn, bridge.Config{}); err != nil {
		t.Fatal(err)
	}
	var tags []bridge.TagConfig
	for _, tg := range e.pair.Tags() {
		tags = append(tags, bridge.TagConfig{Name: tg.Name, Address: tg.NodeID().String(), Writable: tg.Writable()})
	}
	if err := e.b.AddSource(e.src, tags); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	return e
}

func (e *opcuaEnv) count(tag string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.updates[tag])
}

func (e *opcuaEnv) last(tag string) wire.Update {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.updates[tag]
	if len(u) == 0 {
		return wire.Update{}
	}
	return u[len(u)-1]
}

// seqGaps counts, over every tag, the updates the relay numbered but the
// consumer did not see, and the ones it saw twice.
func (e *opcuaEnv) seqGaps() (lost, dup int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, us := range e.updates {
		var prev uint64
		for _, u := range us {
			switch {
			case u.Seq <= prev:
				dup++
			case u.Seq > prev+1:
				lost += int(u.Seq - prev - 1)
			}
			if u.Seq > prev {
				prev = u.Seq
			}
		}
	}
	return lost, dup
}

func TestOPCUASourceRelaysTags(t *testing.T) {
	e := startOPCUAEnv(t, uaserver.WithTags(8))
	counter := e.pair.Tags()[0].Name
	testutil.WaitFor(t, "counter updates", 10*time.Second, func() bool { return e.count(counter) >= 5 })
	u := e.last(counter)
	if u.Status.Quality() != wire.QualityGood || u.SourceTime.IsZero() || u.ServerTime.IsZero() {
		t.Fatalf("update %+v: want Good with both timestamps", u)
	}
	if _, ok := u.Value.(uint64); !ok {
		if _, ok := u.Value.(int64); !ok {
			if _, ok := u.Value.(uint32); !ok {
				t.Logf("counter value type %T", u.Value)
			}
		}
	}
	// Every tag reports, with Good quality.
	for _, tg := range e.pair.Tags() {
		testutil.WaitFor(t, tg.Name, 10*time.Second, func() bool { return e.count(tg.Name) > 0 })
	}
	st := e.b.Stats()[0]
	if st.Health.State != bridge.StateConnected || !st.Health.Writable || st.Failed != 0 {
		t.Fatalf("source stats %+v", st)
	}
}

func TestOPCUAGracefulStopFailoverLosesNothing(t *testing.T) {
	e := startOPCUAEnv(t, uaserver.WithTags(8), uaserver.WithServiceLevels(250, 90))
	counter := e.pair.Tags()[0].Name
	testutil.WaitFor(t, "counter updates", 10*time.Second, func() bool { return e.count(counter) >= 5 })
	before := e.count(counter)
	// The Warm primary leaves: publishes 0, the backup promotes to 250,
	// and the primary stops a second later.
	e.pair.A().GracefulStop(time.Second)
	e.pair.B().Promote()
	testutil.WaitFor(t, "updates from the backup", 10*time.Second, func() bool {
		return e.b.Stats()[0].Health.Endpoint == e.pair.B().Endpoint() && e.count(counter) > before+5
	})
	if lost, dup := e.seqGaps(); lost != 0 || dup != 0 {
		t.Fatalf("relay lost %d and duplicated %d updates across the failover", lost, dup)
	}
	e.mu.Lock()
	backwards := e.backwards
	e.mu.Unlock()
	if backwards != 0 {
		t.Fatalf("%d updates went back in source time across the failover", backwards)
	}
	e.mu.Lock()
	refreshes := e.refresh
	e.mu.Unlock()
	if refreshes < 2 {
		t.Fatalf("%d refresh frames, want the startup one and the promotion's", refreshes)
	}
	if st := e.b.Stats()[0]; !strings.Contains(st.Health.LastSwitch, "failover") {
		t.Fatalf("health %+v does not name the failover", st.Health)
	}
}

func TestOPCUAWriteGate(t *testing.T) {
	e := startOPCUAEnv(t, uaserver.WithTags(2), uaserver.WithSetpoints(1))
	sp := e.pair.Setpoints()[0]
	testutil.WaitFor(t, "setpoint value", 10*time.Second, func() bool { return e.count(sp.Name) > 0 })
	ws, _ := e.b.WriteSubject("opc1", sp.Name)
	m := testutil.Request(t, e.nc, ws, `12.5`)
	if m.Header.Get("Nats-Service-Error-Code") != "" || !strings.Contains(string(m.Data), `"ok":true`) {
		t.Fatalf("write on the healthy primary: %v %s", m.Header, m.Data)
	}
	if v, ok := e.pair.Setpoint(sp.Name); !ok || v != 12.5 {
		t.Fatalf("setpoint at the server = %v", v)
	}
	// The primary becomes a standby (90): refused, never sent.
	writes := len(e.pair.Writes())
	e.pair.A().Demote()
	testutil.WaitFor(t, "the demotion seen", 10*time.Second, func() bool { return !e.b.Stats()[0].Health.Writable })
	m = testutil.Request(t, e.nc, ws, `13.5`)
	if m.Header.Get("Nats-Service-Error-Code") != "503" {
		t.Fatalf("write on a standby answered %v %s", m.Header, m.Data)
	}
	if len(e.pair.Writes()) != writes {
		t.Fatal("a write reached a standby")
	}
}

// TestOPCUAWriteTypeContradiction: a request whose "type" is not the
// setpoint's (a Double) is refused by the relay, and no Write request
// reaches either server; before, the relay sent it and only the server's
// BadTypeMismatch stopped it.
func TestOPCUAWriteTypeContradiction(t *testing.T) {
	e := startOPCUAEnv(t, uaserver.WithTags(2), uaserver.WithSetpoints(1))
	sp := e.pair.Setpoints()[0]
	testutil.WaitFor(t, "setpoint value", 10*time.Second, func() bool { return e.count(sp.Name) > 0 })
	ws, _ := e.b.WriteSubject("opc1", sp.Name)
	written := func() uint64 { return e.pair.A().Stats().NodesWritten + e.pair.B().Stats().NodesWritten }
	for _, body := range []string{`{"value":"12.5","type":"String"}`, `{"value":3,"type":"Int32"}`} {
		m := testutil.Request(t, e.nc, ws, body)
		if m.Header.Get("Nats-Service-Error-Code") != "400" || !strings.Contains(string(m.Data), `contradicts the tag's type Double`) {
			t.Errorf("write %s answered %v %s", body, m.Header, m.Data)
		}
	}
	if n := written(); n != 0 {
		t.Fatalf("%d values reached the servers", n)
	}
	// Positive control: the setpoint's own type reaches the server.
	if m := testutil.Request(t, e.nc, ws, `{"value":12.5,"type":"Double"}`); m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("write of a Double answered %v %s", m.Header, m.Data)
	}
	if v, ok := e.pair.Setpoint(sp.Name); !ok || v != 12.5 || written() != 1 {
		t.Fatalf("setpoint at the server = %v after %d values written", v, written())
	}
}
