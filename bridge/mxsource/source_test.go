package mxsource_test

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/mxgateway"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/mxsim"
	"github.com/apbridge/apbridge/wire"
)

func TestRelaysGatewayTagsWithOneSupervisoryBulkSubscribe(t *testing.T) {
	e := startMx(t, envConfig{})
	e.flowing(t, 3)
	u := e.last("c0")
	if u.Status != wire.StatusGood || u.SourceTime.IsZero() {
		t.Fatalf("update %+v: want Good with a source time", u)
	}
	if _, ok := u.Value.(int64); !ok {
		t.Fatalf("value %T, want int64", u.Value)
	}
	st := e.gw[0].Stats()
	if st.CommandsByKind["SubscribeBulk"] != 1 || st.SupervisoryBulk != 1 || st.CommandsByKind["AdviseSupervisory"] != 0 {
		t.Fatalf("commands %v (supervisory bulk %d): want one supervisory SubscribeBulk", st.CommandsByKind, st.SupervisoryBulk)
	}
	if rep := e.write(t, "c1", "7"); !rep.OK {
		t.Fatalf("write on a supervisory session: %+v", rep)
	}
}

// An old gateway (no bulk-subscribe-supervisory) never sees
// supervisory=true: it would advise plainly and break writes.
func TestCapabilityGate(t *testing.T) {
	e := startMx(t, envConfig{tags: 20, setup: func(_ int, g *mxsim.Gateway) {
		var caps []string
		for _, c := range mxsim.DefaultCapabilities() {
			if c != mxgateway.CapBulkSubscribeSupervisory {
				caps = append(caps, c)
			}
		}
		g.SetCapabilities(caps)
	}})
	e.flowing(t, 2)
	// flowing looks at the first tags only; the advises go one by one.
	testutil.WaitFor(t, "every tag Good", 10*time.Second, func() bool { return e.sourceStats().Good == 20 })
	st := e.gw[0].Stats()
	if st.CommandsByKind["SubscribeBulk"] != 0 || st.CommandsByKind["AddItemBulk"] != 1 || st.CommandsByKind["AdviseSupervisory"] != 20 {
		t.Fatalf("commands %v: want AddItemBulk once and AdviseSupervisory per item, no SubscribeBulk", st.CommandsByKind)
	}
	if st.MaxConcurrent > 1 {
		t.Fatalf("the worker ran %d commands at once", st.MaxConcurrent)
	}
	if rep := e.write(t, "c1", "7"); !rep.OK {
		t.Fatalf("write after per-item supervisory advises: %+v", rep)
	}
}

// A session with a write user advises plainly in one command, and writes
// as that user.
func TestWriteUserSession(t *testing.T) {
	e := startMx(t, envConfig{cfg: mxsource.Config{WriteUserID: 5}})
	e.flowing(t, 2)
	st := e.gw[0].Stats()
	if st.CommandsByKind["SubscribeBulk"] != 1 || st.SupervisoryBulk != 0 {
		t.Fatalf("commands %v (supervisory bulk %d): want one plain SubscribeBulk", st.CommandsByKind, st.SupervisoryBulk)
	}
	if rep := e.write(t, "c2", "11"); !rep.OK {
		t.Fatalf("write: %+v", rep)
	}
	testutil.WaitFor(t, "the written value", 5*time.Second, func() bool {
		v, _, _, _ := e.data.Get("Counter_2.Value")
		n, _ := v.(int64)
		return n >= 11
	})
}

func TestUnknownItemIsNamedAndRetriedAlone(t *testing.T) {
	e := startMx(t, envConfig{extra: []bridge.TagConfig{{Name: "late", Address: "Late_1.PV"}}})
	e.flowing(t, 2)
	testutil.WaitFor(t, "the unknown item reported", 5*time.Second, func() bool { return e.sourceStats().Failed == 1 })
	if f := e.sourceStats().FailedTags; len(f) != 1 || f[0].Tag != "late" || !strings.Contains(f[0].Error, "Late_1.PV") {
		t.Fatalf("failed tags in status: %+v, want late named with its address", f)
	}
	// The guard retries the failed item alone, never the whole set.
	testutil.WaitFor(t, "a retry", 5*time.Second, func() bool { return e.commands(0, "SubscribeBulk") >= 2 })
	e.data.Define("Late_1.PV", int32(42))
	testutil.WaitFor(t, "the late item subscribed", 10*time.Second, func() bool { return e.count("late") > 0 })
	if got, n := e.gw[0].Stats().Items["SubscribeBulk"], e.commands(0, "SubscribeBulk"); got != 5+n-1 {
		t.Fatalf("%d addresses in %d subscribes: the retries carried more than the failed item", got, n)
	}
	if v := e.last("late"); v.Value != int32(42) {
		t.Fatalf("late = %+v", v)
	}
}

func TestKillPromotesTheWarmStandby(t *testing.T) {
	e := startMx(t, envConfig{gateways: 2})
	e.flowing(t, 3)
	testutil.WaitFor(t, "standby items added", 5*time.Second, func() bool { return e.commands(1, "AddItemBulk") >= 1 })
	if n := e.commands(1, "SubscribeBulk"); n != 0 {
		t.Fatalf("the warm standby advised %d times before the switch", n)
	}
	refresh := e.refreshes()
	e.gw[0].Kill()
	testutil.WaitFor(t, "switch", 5*time.Second, func() bool { return e.switchCount() == 1 })
	e.flowing(t, 3)
	if h := e.src.Health(); h.Endpoint != e.gw[1].Addr() {
		t.Fatalf("health %+v: want the backup active", h)
	}
	if e.refreshes() <= refresh {
		t.Fatal("no refresh framed the switch")
	}
	// The killed gateway comes back as the standby.
	if err := e.gw[0].Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "standby again", 10*time.Second, func() bool { return e.src.Health().State == bridge.StateConnected })
}

func TestHotStandbyPromotesWithoutACommand(t *testing.T) {
	e := startMx(t, envConfig{gateways: 2, cfg: mxsource.Config{Mode: mxsource.ModeHot}})
	e.flowing(t, 3)
	testutil.WaitFor(t, "standby advised", 5*time.Second, func() bool { return e.commands(1, "SubscribeBulk") == 1 })
	e.gw[0].Kill()
	testutil.WaitFor(t, "switch", 5*time.Second, func() bool { return e.switchCount() == 1 })
	e.flowing(t, 3)
	if n := e.commands(1, "SubscribeBulk"); n != 1 {
		t.Fatalf("the hot standby was subscribed %d times; a promotion needs no command", n)
	}
}

// A graceful stream end on a single gateway reopens the session and
// subscribes once more; one on the active of a pair promotes the standby.
func TestGracefulEndReopensAndSubscribesOnce(t *testing.T) {
	e := startMx(t, envConfig{})
	e.flowing(t, 2)
	e.gw[0].EndStreams()
	testutil.WaitFor(t, "second subscribe", 5*time.Second, func() bool { return e.commands(0, "SubscribeBulk") >= 2 })
	e.flowing(t, 3)
	if n := e.commands(0, "SubscribeBulk"); n != 2 {
		t.Fatalf("%d subscribes after one graceful end: want exactly 2", n)
	}
}

// A Bad quality from the Galaxy passes through as quality and is no
// reason to switch; a dead gateway is (the positive control).
func TestGalaxyQualityDoesNotSwitch(t *testing.T) {
	e := startMx(t, envConfig{gateways: 2, period: time.Hour, cfg: mxsource.Config{ProbeInterval: 100 * time.Millisecond}})
	testutil.WaitFor(t, "first values", 5*time.Second, func() bool { return e.count("c0") > 0 })
	e.data.Set("Counter_0.Value", int64(-1), 0x18) // bad: communication failure
	testutil.WaitFor(t, "bad quality relayed", 5*time.Second, func() bool { return e.last("c0").Status == wire.StatusBadCommunicationErr })
	// The source keeps judging the gateway (pings answered) and does not
	// switch.
	pings := e.commands(0, "Ping")
	testutil.WaitFor(t, "three more pings", 5*time.Second, func() bool { return e.commands(0, "Ping") >= pings+3 })
	if n := e.switchCount(); n != 0 {
		t.Fatalf("%d switches on a Bad quality", n)
	}
	e.gw[0].Kill()
	testutil.WaitFor(t, "switch on a dead gateway", 5*time.Second, func() bool { return e.switchCount() == 1 })
	if e.last("c0").Status != wire.StatusBadCommunicationErr {
		t.Fatalf("after the switch c0 = %+v: the Galaxy's quality must come through", e.last("c0"))
	}
}

// A frozen link (no heartbeats) promotes the standby; a slow worker (pings
// past their deadline) does too, but on a single gateway it only stays.
func TestFrozenLinkPromotesTheStandby(t *testing.T) {
	var proxy *faultproxy.Proxy
	e := startMx(t, envConfig{gateways: 2, endpoint: proxiedPrimary(t, &proxy), setup: func(_ int, g *mxsim.Gateway) { g.SetHeartbeatInterval(100 * time.Millisecond) },
		cfg: mxsource.Config{HeartbeatTimeout: 500 * time.Millisecond}})
	e.flowing(t, 2)
	proxy.Freeze()
	testutil.WaitFor(t, "switch", 5*time.Second, func() bool { return e.switchCount() == 1 })
	e.mu.Lock()
	cause := e.switches[0].Cause
	e.mu.Unlock()
	if !strings.Contains(cause, "heartbeat") {
		t.Fatalf("cause %q: want heartbeats missing", cause)
	}
	e.flowing(t, 2)
	proxy.Heal()
}

func TestSlowWorkerPromotesTheStandby(t *testing.T) {
	e := startMx(t, envConfig{gateways: 2, cfg: mxsource.Config{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 300 * time.Millisecond}})
	e.flowing(t, 2)
	e.gw[0].SetCommandLatency(2 * time.Second)
	testutil.WaitFor(t, "switch", 5*time.Second, func() bool { return e.switchCount() == 1 })
	e.mu.Lock()
	cause := e.switches[0].Cause
	e.mu.Unlock()
	if !strings.Contains(cause, "ping") {
		t.Fatalf("cause %q: want the health ping", cause)
	}
	e.gw[0].SetCommandLatency(0)
	e.flowing(t, 2)
}

func TestSlowSingleGatewayIsNotReopened(t *testing.T) {
	e := startMx(t, envConfig{cfg: mxsource.Config{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond}})
	e.flowing(t, 2)
	opened := e.src.Stats().SessionsOpened
	e.gw[0].SetCommandLatency(time.Second)
	// Positive control: the pings do go past their deadline.
	testutil.WaitFor(t, "pings past their deadline", 5*time.Second, func() bool { return e.gw[0].Stats().CommandsByKind["Ping"] >= 3 })
	e.gw[0].SetCommandLatency(0)
	e.flowing(t, 2)
	if n := e.src.Stats().SessionsOpened; n != opened {
		t.Fatalf("%d sessions opened on a slow single gateway, want %d: reopening resubscribes everything", n, opened)
	}
	if n := e.commands(0, "SubscribeBulk"); n != 1 {
		t.Fatalf("%d subscribes on a slow single gateway, want 1", n)
	}
}

func TestBadWriteIsRefusedClearly(t *testing.T) {
	e := startMx(t, envConfig{cfg: mxsource.Config{WriteUserID: 5}})
	e.flowing(t, 2)
	if rep := e.write(t, "c0", `"text"`); rep.OK || !strings.Contains(rep.Error, `a JSON string is not a Int64`) {
		t.Fatalf("a string to an int64 item: %+v, want a type refusal that names the value", rep)
	}
	before, _, _, _ := e.data.Get("Counter_0.Value")
	if rep := e.write(t, "c0", "1.5"); rep.OK {
		t.Fatalf("a fraction to an int64 item: %+v", rep)
	}
	if after, _, _, _ := e.data.Get("Counter_0.Value"); after.(int64) < before.(int64) {
		t.Fatal("a refused write changed the item")
	}
}

func TestNotAGatewayAndTLSMismatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	src, err := mxsource.New("web", mxsource.Config{Endpoints: []string{ln.Addr().String()}, ReconnectDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := &healthLog{}
	startBare(t, src, h)
	testutil.WaitFor(t, "a clear error", 5*time.Second, func() bool {
		return strings.Contains(src.Health().Detail, "does not speak the MxAccess gateway protocol")
	})

	// TLS to a plaintext gateway.
	g, err := mxsim.Start(mxsim.NewData())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	tlsSrc, err := mxsource.New("tls", mxsource.Config{Endpoints: []string{g.Addr()}, TLS: &mxsource.TLSConfig{}, ReconnectDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	startBare(t, tlsSrc, &healthLog{})
	testutil.WaitFor(t, "a TLS error", 5*time.Second, func() bool {
		d := tlsSrc.Health().Detail
		return strings.Contains(d, "tls") || strings.Contains(d, "TLS")
	})
	if st := g.Stats(); st.Sessions != 0 {
		t.Fatalf("%d sessions opened over a TLS mismatch", st.Sessions)
	}
}

func (e *mxEnv) refreshes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refresh
}

// A lone gateway back from a restart is used at once (not after gRPC's
// own reconnect backoff), and subscribed exactly once more.
func TestRestartedGatewayIsUsedAtOnce(t *testing.T) {
	e := startMx(t, envConfig{})
	e.flowing(t, 2)
	e.gw[0].Kill()
	testutil.WaitFor(t, "source down", 5*time.Second, func() bool { return e.src.Health().State == bridge.StateDown })
	// An outage long enough for the reconnect backoff to grow.
	outage := time.NewTimer(1500 * time.Millisecond)
	<-outage.C
	before := e.commands(0, "SubscribeBulk")
	if err := e.gw[0].Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	e.flowing(t, 2)
	if d := time.Since(back); d > 3*time.Second {
		t.Fatalf("data flowed again %v after the gateway came back", d)
	}
	if n := e.commands(0, "SubscribeBulk") - before; n != 1 {
		t.Fatalf("%d subscribes on the restarted gateway, want 1", n)
	}
}

// A long subscribe of our own is no sign of a dead gateway: no health ping
// queues behind it (it would time the subscribe, and switch). The
// positive control: a slow worker afterwards does switch.
func TestLongSubscribeIsNotADeadGateway(t *testing.T) {
	var once sync.Once
	e := startMx(t, envConfig{gateways: 2, cfg: mxsource.Config{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 300 * time.Millisecond},
		setup: func(i int, g *mxsim.Gateway) {
			if i > 0 {
				return
			}
			g.OnCommand(func(_, kind string) {
				if kind == "SubscribeBulk" {
					once.Do(func() {
						g.SetCommandLatency(time.Hour)
						time.AfterFunc(1500*time.Millisecond, func() { g.SetCommandLatency(0) })
					})
				}
			})
		}})
	e.flowing(t, 3)
	if n := e.switchCount(); n != 0 {
		t.Fatalf("%d switches during a 1.5 s subscribe", n)
	}
	e.gw[0].SetCommandLatency(2 * time.Second)
	testutil.WaitFor(t, "switch on a slow worker", 5*time.Second, func() bool { return e.switchCount() == 1 })
	e.gw[0].SetCommandLatency(0)
}

// The refresh that frames a switch carries every tag's value, also one
// that has not changed (and so repeats, marked as a refresh): that is how
// a consumer knows it is whole again.
func TestRefreshCarriesEveryTag(t *testing.T) {
	for _, mode := range []string{mxsource.ModeWarm, mxsource.ModeHot} {
		t.Run(mode, func(t *testing.T) {
			e := startMx(t, envConfig{gateways: 2, period: time.Hour, cfg: mxsource.Config{Mode: mode}})
			testutil.WaitFor(t, "first values", 5*time.Second, func() bool {
				for _, tg := range e.tags {
					if e.count(tg.Name) != 1 {
						return false
					}
				}
				return true
			})
			testutil.WaitFor(t, "standby prepared", 5*time.Second, func() bool {
				return e.commands(1, "AddItemBulk")+e.commands(1, "SubscribeBulk") >= 1
			})
			e.gw[0].Kill()
			testutil.WaitFor(t, "every tag's value in the refresh", 5*time.Second, func() bool {
				for _, tg := range e.tags {
					if e.count(tg.Name) != 2 {
						return false
					}
				}
				return true
			})
		})
	}
}

// A blip (the connection to a live gateway reset) resumes the session's
// stream: the gateway sends again what was lost in transit, so no value is
// missed, no session reopened, no standby promoted. The positive control:
// a gateway that does not resume streams gets its session reopened.
func TestBlipResumesTheStream(t *testing.T) {
	for _, resume := range []bool{true, false} {
		t.Run(fmt.Sprintf("resume=%v", resume), func(t *testing.T) {
			var proxy *faultproxy.Proxy
			e := startMx(t, envConfig{gateways: 2, period: 10 * time.Millisecond,
				setup: func(_ int, g *mxsim.Gateway) {
					if !resume {
						g.SetCapabilities(slices.DeleteFunc(mxsim.DefaultCapabilities(),
							func(c string) bool { return c == mxgateway.CapEventResume }))
					}
				},
				endpoint: proxiedPrimary(t, &proxy)})
			e.flowing(t, 5)
			opened := e.src.Stats().SessionsOpened
			if proxy.ResetAll() == 0 {
				t.Fatal("no connection to reset")
			}
			if !resume {
				testutil.WaitFor(t, "the session given up", 5*time.Second, func() bool { return e.switchCount() == 1 })
				return
			}
			testutil.WaitFor(t, "the stream resumed", 5*time.Second, func() bool { return e.src.Stats().Resumes == 1 })
			e.flowing(t, 10)
			// A second blip, later than the first one's resume window.
			late := time.NewTimer(2500 * time.Millisecond)
			<-late.C
			proxy.ResetAll()
			testutil.WaitFor(t, "the stream resumed again", 5*time.Second, func() bool { return e.src.Stats().Resumes == 2 })
			e.flowing(t, 10)
			if n := e.src.Stats().SessionsOpened; n != opened {
				t.Fatalf("%d sessions opened across a blip, want %d", n, opened)
			}
			if n := e.switchCount(); n != 0 {
				t.Fatalf("%d switches on a blip", n)
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			for _, tg := range e.tags {
				var prev int64
				for _, u := range e.updates[tg.Name] {
					v := u.Value.(int64)
					if prev != 0 && v > prev+1 {
						t.Fatalf("%s jumped from %d to %d across the blip", tg.Name, prev, v)
					}
					prev = max(prev, v)
				}
			}
		})
	}
}
