package mxsource_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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

// Against a gateway that advertises only today's nine capabilities the
// source works with default settings: no Ping is sent (the gateway would
// refuse it), the heartbeat interval its reply carries is not trusted
// (it sends no heartbeats: a watch would end every quiet session), and
// writes go through per-item supervisory advises. The positive control is
// the same gateway with apbridge's capabilities: pinged.
func TestBaseGatewayCapabilities(t *testing.T) {
	for _, base := range []bool{true, false} {
		t.Run(map[bool]string{true: "base", false: "default"}[base], func(t *testing.T) {
			e := startMx(t, envConfig{period: 700 * time.Millisecond,
				setup: func(_ int, g *mxsim.Gateway) {
					g.SetHeartbeatInterval(50 * time.Millisecond)
					if base {
						g.SetCapabilities(mxsim.BaseCapabilities())
					}
				},
				cfg: mxsource.Config{ProbeInterval: 100 * time.Millisecond, HeartbeatTimeout: 300 * time.Millisecond}})
			testutil.WaitFor(t, "every tag Good", 10*time.Second, func() bool { return e.sourceStats().Good == 4 })
			// Counters that change every 700 ms leave the stream silent
			// longer than the heartbeat timeout: two changes' worth.
			quiet := time.NewTimer(1500 * time.Millisecond)
			<-quiet.C
			st := e.gw[0].Stats()
			if base {
				if st.CommandsByKind["Ping"] != 0 || st.Unadvertised["Ping"] != 0 {
					t.Fatalf("commands %v, unadvertised %v: no Ping to a gateway without %s", st.CommandsByKind, st.Unadvertised, mxgateway.CapPing)
				}
				if n := e.src.Stats().SessionsOpened; n != 1 {
					t.Fatalf("%d sessions opened: a quiet stream of a gateway without heartbeats was taken for dead", n)
				}
				if st.CommandsByKind["AdviseSupervisory"] != 4 || st.SupervisoryBulk != 0 {
					t.Fatalf("commands %v: want per-item supervisory advises", st.CommandsByKind)
				}
			} else if st.CommandsByKind["Ping"] == 0 {
				t.Fatalf("commands %v: a gateway with %s is pinged", st.CommandsByKind, mxgateway.CapPing)
			}
			if rep := e.write(t, "c1", "7"); !rep.OK {
				t.Fatalf("write: %+v", rep)
			}
			if n := st.ResumeRequests; n != 0 {
				t.Fatalf("%d resume requests without a blip", n)
			}
		})
	}
}

// A relay that dies (its source abandoned: the gateway session left open,
// the state file as last written) and a successor with the same state
// file: on a gateway that resumes streams the successor resumes the dead
// session's stream after its last stored event, and no counter value is
// lost, not even those the gateway sent that never reached the dead relay; it opens no session and sends no subscribe. Without resume, or
// with the session gone, the successor opens a new one, subscribes every
// tag with a refresh and counts the fallback.
func TestSuccessorResumesTheSession(t *testing.T) {
	for _, tc := range []struct {
		name   string
		caps   []string
		window time.Duration
		resume bool
	}{
		{"resume", mxsim.DefaultCapabilities(), 0, true},
		{"no-resume", slices.DeleteFunc(mxsim.DefaultCapabilities(), func(c string) bool { return c == mxgateway.CapEventResume }), 0, false},
		{"session-gone", mxsim.DefaultCapabilities(), 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "mx1.mx-state.json")
			var proxy *faultproxy.Proxy
			e1 := startMx(t, envConfig{period: 10 * time.Millisecond, stateFile: state, endpoint: proxiedPrimary(t, &proxy),
				setup: func(_ int, g *mxsim.Gateway) {
					g.SetCapabilities(tc.caps)
					g.SetResumeWindow(tc.window)
				}})
			e1.flowing(t, 20)
			// The state file names the session and a stored event.
			testutil.WaitFor(t, "the state file", 5*time.Second, func() bool {
				b, err := readFile(state)
				return err == nil && strings.Contains(b, `"lastStored"`) && !strings.Contains(b, `"lastStored": 0`)
			})
			// The relay's last moments: what the gateway sends does not
			// reach it (sent, so only a replay brings it back), and then
			// it dies.
			proxy.Freeze()
			late := time.NewTimer(300 * time.Millisecond)
			<-late.C
			mxsource.Abandon(e1.src)
			proxy.ResetAll()
			proxy.Heal()
			g := e1.gw[0]
			if tc.window > 0 {
				testutil.WaitFor(t, "the gateway forgot the session", 5*time.Second, func() bool { return g.Stats().Sessions == 0 })
			}
			g.ResetStats()
			e2 := startMx(t, envConfig{period: 10 * time.Millisecond, stateFile: state, reuse: e1,
				endpoint: func(int, *mxsim.Gateway) string { return proxy.Addr() }})
			e2.flowing(t, 20)
			st, gst := e2.src.Stats(), g.Stats()
			// What the relay's status and metrics read.
			if tr, fb := e2.src.SuccessorTakeovers(); tr != st.SuccessorResumes || fb != st.ResumeFallbacks {
				t.Fatalf("SuccessorTakeovers %d, %d; stats %+v", tr, fb, st)
			}
			if !tc.resume {
				if st.ResumeFallbacks != 1 || st.SuccessorResumes != 0 || st.SessionsOpened != 1 || gst.CommandsByKind["SubscribeBulk"] != 1 {
					t.Fatalf("stats %+v, gateway commands %v: want the fallback counted, a new session subscribed", st, gst.CommandsByKind)
				}
				e2.mu.Lock()
				refreshes := e2.refresh
				e2.mu.Unlock()
				if refreshes == 0 {
					t.Fatal("the fallback's values were not framed as a refresh")
				}
				return
			}
			if st.SuccessorResumes != 1 || st.ResumeFallbacks != 0 || st.SessionsOpened != 0 || gst.Commands != 0 {
				t.Fatalf("stats %+v, gateway commands %v: want the session resumed, no command", st, gst.CommandsByKind)
			}
			// Nothing lost: per counter, what both relays published
			// covers every value from the first to the last.
			for _, tg := range e1.tags {
				noCounterGap(t, tg.Name, "across the successor", e1, e2)
			}
		})
	}
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// memStore is a HandoffStore in memory: the predecessor's handoff, and
// what the source records.
type memStore struct {
	mu   sync.Mutex
	prev *mxsource.Handoff
	recs []mxsource.Handoff
}

func (m *memStore) LoadHandoff() (*mxsource.Handoff, error) { return m.prev, nil }

func (m *memStore) RecordHandoff(h mxsource.Handoff) error {
	m.mu.Lock()
	m.recs = append(m.recs, h)
	m.mu.Unlock()
	return nil
}

// valuesHandler is a bridge.Handler that keeps each handle's values.
type valuesHandler struct {
	mu     sync.Mutex
	values map[uint32][]int64
}

func (h *valuesHandler) Update(handle uint32, u wire.Update) {
	if v, ok := u.Value.(int64); ok {
		h.mu.Lock()
		h.values[handle] = append(h.values[handle], v)
		h.mu.Unlock()
	}
}
func (h *valuesHandler) RefreshStart(string)         {}
func (h *valuesHandler) RefreshEnd()                 {}
func (h *valuesHandler) HealthChanged(bridge.Health) {}
func (h *valuesHandler) Restored()                   {}

func (h *valuesHandler) get(handle uint32) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.values[handle])
}

// A successor (through a HandoffStore, as a fleet's relay keeps it) whose
// bridge subscribes its tags in two calls, the second well after the
// first: the changes of the adopted items not in the first call wait for
// the second, in order, and none is lost; the handoff moves on only once
// every adopted item is mapped. (A successor that relayed only what the
// first call mapped lost the rest's changes until their subscribe.)
//
// A record may name fewer items than the session advised (one written
// before a subscribe's answer): the changes of the others are held the
// same way, in order, until their tags' subscribe maps them.
func TestSuccessorAdoptsAcrossSubscribes(t *testing.T) {
	t.Run("every item recorded", func(t *testing.T) { testSuccessorAdopts(t, false) })
	t.Run("the second call's items not recorded", func(t *testing.T) { testSuccessorAdopts(t, true) })
}

func testSuccessorAdopts(t *testing.T, unrecorded bool) {
	state := filepath.Join(t.TempDir(), "mx1.mx-state.json")
	e1 := startMx(t, envConfig{period: 10 * time.Millisecond, stateFile: state})
	e1.flowing(t, 20)
	testutil.WaitFor(t, "the state file, with every item", 5*time.Second, func() bool {
		b, err := readFile(state)
		var h mxsource.Handoff
		return err == nil && json.Unmarshal([]byte(b), &h) == nil && h.LastStored > 0 && len(h.Items) == len(e1.tags)
	})
	mxsource.Abandon(e1.src)
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var prev mxsource.Handoff
	if err := json.Unmarshal(b, &prev); err != nil {
		t.Fatal(err)
	}
	if unrecorded {
		for _, tc := range e1.tags[2:] {
			delete(prev.Items, tc.Address)
		}
		if len(prev.Items) != 2 {
			t.Fatalf("recorded items %v: want the first call's two", prev.Items)
		}
	}
	store := &memStore{prev: &prev}
	src, err := mxsource.New("mx1", mxsource.Config{Endpoints: []string{e1.gw[0].Addr()}}, mxsource.WithHandoffStore(store))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	h := &valuesHandler{values: map[uint32][]int64{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := src.Start(ctx, h); err != nil {
		t.Fatal(err)
	}
	tags := make([]bridge.Tag, len(e1.tags))
	for i, tc := range e1.tags {
		tags[i] = bridge.Tag{Name: tc.Name, Address: tc.Address, Handle: uint32(i + 1)}
	}
	subscribe := func(tags []bridge.Tag) {
		t.Helper()
		testutil.WaitFor(t, "the subscribe", 10*time.Second, func() bool {
			errs, err := src.Subscribe(ctx, tags)
			return err == nil && !slices.ContainsFunc(errs, func(e error) bool { return e != nil })
		})
	}
	subscribe(tags[:2])
	testutil.WaitFor(t, "20 values of the first call's tags", 10*time.Second, func() bool { return len(h.get(1)) >= 20 })
	store.mu.Lock()
	early := len(store.recs)
	store.mu.Unlock()
	subscribe(tags[2:])
	testutil.WaitFor(t, "20 values of the second call's tags", 10*time.Second, func() bool { return len(h.get(4)) >= 20 })
	for i, tg := range tags {
		var before []int64
		e1.mu.Lock()
		for _, u := range e1.updates[tg.Name] {
			before = append(before, u.Value.(int64))
		}
		e1.mu.Unlock()
		after := h.get(tg.Handle)
		all := append(before, after...)
		lo, hi := slices.Min(all), slices.Max(all)
		seen := map[int64]bool{}
		for _, v := range all {
			seen[v] = true
		}
		for v := lo; v <= hi; v++ {
			if !seen[v] {
				t.Fatalf("%s (subscribe call %d): value %d lost across the successor (seen %d-%d; the successor's first %v)",
					tg.Name, i/2+1, v, lo, hi, after[:min(5, len(after))])
			}
		}
	}
	if st := src.Stats(); st.SuccessorResumes != 1 || st.SessionsOpened != 0 {
		t.Fatalf("stats %+v: want the session resumed", st)
	}
	// With every item recorded, the first call leaves two adopted items
	// unmapped: nothing is recorded until the second maps them. (With
	// the second call's items unrecorded the first maps every adopted
	// one, and a record may follow between their changes.)
	if !unrecorded && early != 0 {
		t.Fatalf("%d handoffs recorded before every adopted item was mapped: %+v", early, store.recs[:early])
	}
	testutil.WaitFor(t, "a handoff recorded", 5*time.Second, func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.recs) > 0
	})
}
