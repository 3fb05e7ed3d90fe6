package mxsource_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// mxEnv relays a gateway pair's (or one gateway's) counters onto the
// embedded cluster through a real bridge.
type mxEnv struct {
	data *mxsim.Data
	gw   []*mxsim.Gateway
	src  *mxsource.Source
	b    *bridge.Bridge
	tags []bridge.TagConfig

	mu       sync.Mutex
	updates  map[string][]wire.Update
	refresh  int
	switches []mxsource.Event
}

type envConfig struct {
	gateways int
	tags     int
	period   time.Duration
	cfg      mxsource.Config
	setup    func(i int, g *mxsim.Gateway)
	extra    []bridge.TagConfig // tags beyond the counters
	endpoint func(i int, g *mxsim.Gateway) string
	// reuse runs on the data and gateways of another env (a successor
	// relay); stateFile is the source's WithStateFile.
	reuse     *mxEnv
	stateFile string
}

func startMx(t *testing.T, ec envConfig) *mxEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := &mxEnv{data: mxsim.NewData(), updates: map[string][]wire.Update{}}
	if ec.tags == 0 {
		ec.tags = 4
	}
	if ec.period == 0 {
		ec.period = 50 * time.Millisecond
	}
	if ec.reuse != nil {
		e.data = ec.reuse.data
	} else {
		stop := e.data.RunCounters("Counter_", ec.tags, ec.period)
		t.Cleanup(stop)
	}
	for i := range ec.tags {
		e.tags = append(e.tags, bridge.TagConfig{Name: fmt.Sprintf("c%d", i), Address: fmt.Sprintf("Counter_%d.Value", i), Writable: true})
	}
	e.tags = append(e.tags, ec.extra...)
	cfg := ec.cfg
	cfg.Endpoints = nil
	for i := range max(ec.gateways, 1) {
		var g *mxsim.Gateway
		if ec.reuse != nil {
			g = ec.reuse.gw[i]
		} else {
			var err error
			if g, err = mxsim.Start(e.data); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(g.Close)
			g.SetName(fmt.Sprintf("gw%d", i))
			if ec.setup != nil {
				ec.setup(i, g)
			}
		}
		e.gw = append(e.gw, g)
		ep := g.Addr()
		if ec.endpoint != nil {
			ep = ec.endpoint(i, g)
		}
		cfg.Endpoints = append(cfg.Endpoints, ep)
	}
	if cfg.ReconnectDelay == 0 {
		cfg.ReconnectDelay = 50 * time.Millisecond
	}
	cl, conn := testutil.ClusterConn(t)
	nc, err := nats.Connect(cl.Node(1).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	nc.Subscribe("apbridge.mx1.>", func(m *nats.Msg) {
		u, err := wire.DecodeJSON(m.Data)
		if err != nil {
			return
		}
		e.mu.Lock()
		e.updates[u.Tag] = append(e.updates[u.Tag], u)
		e.mu.Unlock()
	})
	nc.Subscribe("apbridge.events.mx1", func(m *nats.Msg) {
		if strings.Contains(string(m.Data), "refresh-start") {
			e.mu.Lock()
			e.refresh++
			e.mu.Unlock()
		}
	})
	nc.Flush()
	sopts := []mxsource.Option{mxsource.WithLogger(testutil.Logger(t)), mxsource.WithEventHandler(func(ev mxsource.Event) {
		if ev.Kind == mxsource.EventSwitch {
			e.mu.Lock()
			e.switches = append(e.switches, ev)
			e.mu.Unlock()
		}
	})}
	if ec.stateFile != "" {
		sopts = append(sopts, mxsource.WithStateFile(ec.stateFile))
	}
	e.src, err = mxsource.New("mx1", cfg, sopts...)
	if err != nil {
		t.Fatal(err)
	}
	guard := bridge.DefaultGuardConfig()
	guard.RetryFloor, guard.RetryCeiling = 100*time.Millisecond, time.Second
	if e.b, err = bridge.New(conn, bridge.Config{Guard: guard}, bridge.WithLogger(testutil.Logger(t))); err != nil {
		t.Fatal(err)
	}
	if err := e.b.AddSource(e.src, e.tags); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	return e
}

func (e *mxEnv) count(tag string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.updates[tag])
}

func (e *mxEnv) last(tag string) wire.Update {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.updates[tag]
	if len(u) == 0 {
		return wire.Update{}
	}
	return u[len(u)-1]
}

func (e *mxEnv) switchCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.switches)
}

// flowing waits until every counter tag has n more updates than now.
func (e *mxEnv) flowing(t *testing.T, n int) {
	t.Helper()
	base := map[string]int{}
	for _, tg := range e.tags[:4] {
		base[tg.Name] = e.count(tg.Name)
	}
	testutil.WaitFor(t, "updates flowing", 10*time.Second, func() bool {
		for name, b := range base {
			if e.count(name) < b+n {
				return false
			}
		}
		return true
	})
}

// sourceStats returns the bridge's stats of the source.
func (e *mxEnv) sourceStats() bridge.SourceStats {
	for _, s := range e.b.Stats() {
		if s.Name == "mx1" {
			return s
		}
	}
	return bridge.SourceStats{}
}

// commands returns how many commands of kind gateway i ran.
func (e *mxEnv) commands(i int, kind string) uint64 {
	return e.gw[i].Stats().CommandsByKind[kind]
}

// write writes v to tag through the bridge, as a write-back request.
func (e *mxEnv) write(t *testing.T, tag, v string) wire.WriteReply {
	t.Helper()
	subj, ok := e.b.Subject("mx1", tag)
	if !ok {
		t.Fatalf("no subject for %s", tag)
	}
	rep, _ := e.b.Write(subj, []byte(v))
	return rep
}

// healthLog is a bare handler: it records health and nothing else, for a
// source that never gets as far as data.
type healthLog struct {
	mu sync.Mutex
	h  []bridge.Health
}

func (l *healthLog) Update(uint32, wire.Update) {}
func (l *healthLog) RefreshStart(string)        {}
func (l *healthLog) RefreshEnd()                {}
func (l *healthLog) Restored()                  {}
func (l *healthLog) HealthChanged(h bridge.Health) {
	l.mu.Lock()
	l.h = append(l.h, h)
	l.mu.Unlock()
}

func startBare(t *testing.T, src *mxsource.Source, h bridge.Handler) {
	t.Helper()
	if err := src.Start(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
}

// proxiedPrimary puts a fault proxy in front of the primary gateway and
// stores it in *proxy.
func proxiedPrimary(t *testing.T, proxy **faultproxy.Proxy) func(int, *mxsim.Gateway) string {
	return func(i int, g *mxsim.Gateway) string {
		if i > 0 {
			return g.Addr()
		}
		p, err := faultproxy.New(g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		*proxy = p
		return p.Addr()
	}
}

// noCounterGap fails t if counter tag's values, as the relays of envs
// published them together, miss one between the lowest and the highest.
func noCounterGap(t *testing.T, tag, what string, envs ...*mxEnv) {
	t.Helper()
	seen := map[int64]bool{}
	var lo, hi int64
	for _, e := range envs {
		e.mu.Lock()
		for _, u := range e.updates[tag] {
			v := u.Value.(int64)
			seen[v] = true
			if lo == 0 || v < lo {
				lo = v
			}
			hi = max(hi, v)
		}
		e.mu.Unlock()
	}
	for v := lo; v <= hi; v++ {
		if !seen[v] {
			t.Fatalf("%s: value %d lost %s (seen %d-%d)", tag, v, what, lo, hi)
		}
	}
}
