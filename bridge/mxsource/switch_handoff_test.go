package mxsource_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/mxsim"
)

// A double fault: the active gateway dies, the source promotes its
// standby, and the relay dies too, 0.3 s later, before any event of the
// new active's own stream reached it (its channel frozen from before the
// first fault: what the promoted session sends after is lost in transit,
// so only a resume brings it back). The handoff names the promoted
// session as soon as the promotion's refresh is stored, not when an event
// of its stream is: the successor resumes that session. With a hot
// standby no counter value is lost; with a warm one (heartbeats its only
// events before the promotion, its subscribe lost in the freeze) the
// successor subscribes on the resumed session and loses nothing from its
// first value on. (A record that moved only with an event handled and
// stored from the new session still named the dead gateway's session:
// the successor fell back, and lost what changed until its subscribe.)
//
// The positive control that the relay died inside the window: it relayed
// no value newer than the counters had when the first gateway died, and
// the counters moved on by more than a few values before it died.
func TestSuccessorResumesAfterAPromotion(t *testing.T) {
	for _, mode := range []string{mxsource.ModeHot, mxsource.ModeWarm} {
		t.Run(mode, func(t *testing.T) { testResumeAfterPromotion(t, mode) })
	}
}

func testResumeAfterPromotion(t *testing.T, mode string) {
	state := filepath.Join(t.TempDir(), "mx1.mx-state.json")
	var proxy *faultproxy.Proxy
	standbyProxied := func(i int, g *mxsim.Gateway) string {
		if i == 0 {
			return g.Addr()
		}
		p, err := faultproxy.New(g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxy = p
		return p.Addr()
	}
	cfg := mxsource.Config{Mode: mode}
	e1 := startMx(t, envConfig{gateways: 2, period: 10 * time.Millisecond, stateFile: state, cfg: cfg, endpoint: standbyProxied,
		setup: func(i int, g *mxsim.Gateway) {
			if i == 1 {
				// A warm standby's only events before its promotion.
				g.SetHeartbeatInterval(50 * time.Millisecond)
			}
		}})
	e1.flowing(t, 20)
	testutil.WaitFor(t, "standby prepared", 5*time.Second, func() bool {
		return e1.commands(1, "SubscribeBulk")+e1.commands(1, "AddItemBulk") == 1
	})
	// 20 values more at 10 ms: the standby's stream has had events.
	e1.flowing(t, 20)
	first := recorded(t, state)
	if first.Endpoint != e1.gw[0].Addr() || first.LastStored == 0 {
		t.Fatalf("handoff %+v: want the first gateway's session, stored", first)
	}

	proxy.Freeze()
	e1.gw[0].Kill()
	atKill := counters(e1)
	testutil.WaitFor(t, "the standby promoted", 5*time.Second, func() bool { return e1.switchCount() == 1 })
	// The relay's remaining life after the promotion, as in the fleet
	// soak where the owner relay was killed about 0.3 s after it.
	late := time.NewTimer(300 * time.Millisecond)
	<-late.C
	mxsource.Abandon(e1.src)
	atAbandon := counters(e1)
	proxy.ResetAll()
	proxy.Heal()
	rec := recorded(t, state)

	e2 := startMx(t, envConfig{gateways: 2, period: 10 * time.Millisecond, stateFile: state, cfg: cfg, reuse: e1,
		endpoint: func(i int, g *mxsim.Gateway) string {
			if i == 0 {
				return g.Addr()
			}
			return proxy.Addr()
		}})
	e2.flowing(t, 20)
	st := e2.src.Stats()
	for _, tg := range e1.tags[:4] {
		addr := tg.Address
		e1.mu.Lock()
		var top int64
		for _, u := range e1.updates[tg.Name] {
			top = max(top, u.Value.(int64))
		}
		e1.mu.Unlock()
		if top > atKill[addr] {
			t.Fatalf("%s: the dead relay relayed %d, newer than %d at the first fault: it did not die before the promoted session's stream reached it", tg.Name, top, atKill[addr])
		}
		if atAbandon[addr] < atKill[addr]+10 {
			t.Fatalf("%s: %d at the first fault, %d at the second: too few values for only the successor to bring", tg.Name, atKill[addr], atAbandon[addr])
		}
	}
	if st.SuccessorResumes != 1 || st.ResumeFallbacks != 0 {
		t.Fatalf("stats %+v; the dead relay's last handoff %+v (the promoted gateway is %s): want the promoted session resumed", st, rec, proxy.Addr())
	}
	envs := []*mxEnv{e1, e2}
	if mode == mxsource.ModeWarm {
		// The warm switch's own gap (nothing advised on the standby
		// until its subscribe) is no handoff's to close.
		envs = envs[1:]
	}
	for _, tg := range e1.tags[:4] {
		noCounterGap(t, tg.Name, "across the double fault", envs...)
	}
}

// recorded reads the handoff in the state file path.
func recorded(t *testing.T, path string) mxsource.Handoff {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var h mxsource.Handoff
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// counters returns the simulator's current value of each counter of e.
func counters(e *mxEnv) map[string]int64 {
	out := map[string]int64{}
	for _, tg := range e.tags[:4] {
		v, _, _, ok := e.data.Get(tg.Address)
		if !ok {
			panic(fmt.Sprintf("no counter %s", tg.Address))
		}
		out[tg.Address] = v.(int64)
	}
	return out
}
