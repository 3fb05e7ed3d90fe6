package uaclient_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// The Pair's check of its servers against what they say of themselves,
// on real servers: one server reached through two endpoints, a redundant
// set, and servers that do not describe themselves as one.

// TestPairSameServerIsNoStandby: the backup endpoint is a second port of
// the primary's server (uaserver's Alias, as a port forward would be).
// The Pair reports it once, as an error and an event, and does not count
// that session as a standby: its level is not the standby's, and a probe
// of it answers Unknown. A reconnect of it reports nothing new.
func TestPairSameServerIsNoStandby(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	var alias *faultproxy.Proxy
	r := newRig(t, rigOption{levels: [2]byte{250, 240},
		endpoints: func(t *testing.T, s *uaserver.Pair) []string {
			url, px, err := s.A().Alias()
			if err != nil {
				t.Fatal(err)
			}
			alias = px
			return []string{s.A().Endpoint(), url}
		},
		opts: []uaclient.PairOption{uaclient.WithLogger(zerolog.New(logs))},
	})
	uri := r.servers.A().ApplicationURI()
	e := r.waitEvent(mark{}, "the same-server error", kind(uaclient.EventSameServer))
	if e.ApplicationURI != uri || !strings.Contains(e.Reason, "both endpoints reach the same server") ||
		!strings.Contains(e.Message, "no standby") {
		t.Fatalf("event %+v", e)
	}
	st := r.pair.Status()
	if !st.Redundancy.SameServer || st.Redundancy.Problem != e.Reason {
		t.Fatalf("status %+v", st.Redundancy)
	}
	if st.Servers[0].ApplicationURI != uri || st.Servers[1].ApplicationURI != uri {
		t.Fatalf("servers %+v, want %s on both", st.Servers, uri)
	}
	if st.StandbyLevel.Known() || st.Policy.StandbyLevel.Known() {
		t.Fatalf("the session on the primary's own server counts as a standby: status %v, policy %v", st.StandbyLevel, st.Policy.StandbyLevel)
	}

	// The backup's session reconnects: it is still no standby, says so,
	// and the error is not reported again.
	m := r.mark()
	alias.ResetAll()
	r.waitEvent(m, "the backup session lost", kind(uaclient.EventSessionLost))
	up := r.waitEvent(m, "the backup session up again", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventSessionUp && e.Role == uaclient.RoleStandby
	})
	if !up.Level.Known() || !strings.Contains(up.Message, "it is no standby") || strings.Contains(up.Message, "(standby,") {
		t.Fatalf("the backup's session up: level %v, %q", up.Level, up.Message)
	}
	if st := r.pair.Status(); st.StandbyLevel.Known() || st.Policy.StandbyLevel.Known() {
		t.Fatalf("after the reconnect the session counts as a standby: %v, %v", st.StandbyLevel, st.Policy.StandbyLevel)
	}
	if n := len(r.eventsSince(mark{}, uaclient.EventSameServer)); n != 1 {
		t.Fatalf("%d same-server events, want 1", n)
	}
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"event":"same server"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"error"`) {
		t.Fatalf("same-server log lines %q, want one at error level", lines)
	}

	// The primary goes to maintenance: the probe of the "standby" finds
	// nothing to switch to. Counted, the session on the same server would
	// answer its 0, Not Healthy.
	m = r.mark()
	r.servers.A().SetLevel(uaserver.LevelMaintenance)
	stay := r.waitEvent(m, "the probe's answer", kind(uaclient.EventStay))
	if stay.Cause != servicelevel.CausePeerUnknown || stay.PeerLevel.Known() {
		t.Fatalf("stay: cause %v, peer level %v; want the peer unknown", stay.Cause, stay.PeerLevel)
	}
	if evs := r.eventsSince(m, uaclient.EventFailover); len(evs) > 0 {
		t.Fatalf("a failover to the same server: %v", evs[0])
	}
}

// TestPairSameServerResolved: the backup endpoint first reaches the
// primary's server, then (its forward fixed) the backup server: the next
// session on it clears the error, and the standby counts again.
func TestPairSameServerResolved(t *testing.T) {
	var fwd *faultproxy.Proxy
	r := newRig(t, rigOption{levels: [2]byte{250, 240},
		endpoints: func(t *testing.T, s *uaserver.Pair) []string {
			px, err := faultproxy.New(strings.TrimPrefix(s.A().Endpoint(), "opc.tcp://"))
			if err != nil {
				t.Fatal(err)
			}
			fwd = px
			t.Cleanup(func() { fwd.Close() })
			return []string{s.A().Endpoint(), "opc.tcp://" + px.Addr()}
		},
	})
	r.waitEvent(mark{}, "the same-server error", kind(uaclient.EventSameServer))
	m := r.mark()
	addr := fwd.Addr()
	fwd.Close()
	px, err := faultproxy.NewOn(addr, strings.TrimPrefix(r.servers.B().Endpoint(), "opc.tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	fwd = px
	up := r.waitEvent(m, "the backup's session on the backup server", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventSessionUp && e.Role == uaclient.RoleStandby
	})
	if !strings.Contains(up.Message, "(standby, ServiceLevel 240") {
		t.Fatalf("standby up: %q", up.Message)
	}
	st := r.waitStatus("the standby counted", func(st uaclient.PairStatus) bool { return st.Policy.StandbyLevel.Known() })
	if st.Redundancy.SameServer || st.Redundancy.Problem != "" || st.Servers[1].ApplicationURI != r.servers.B().ApplicationURI() {
		t.Fatalf("after the fix: %+v %+v", st.Redundancy, st.Servers[1])
	}
	if v, ok := st.StandbyLevel.Value(); !ok || v != 240 {
		t.Fatalf("standby level %v, want 240", st.StandbyLevel)
	}
}

// TestPairRedundantSetChecked: a pair of two servers that name each other
// in their ServerUriArray gives neither an error nor a warning. The check
// was live: both servers' answers are in the status.
func TestPairRedundantSetChecked(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}})
	st := r.pair.Status()
	for i, s := range r.servers.Servers() {
		info := st.Servers[i]
		if info.ApplicationURI != s.ApplicationURI() || !info.RedundancyKnown || info.Redundancy != ua.RedundancySupportWarm ||
			!slices.Contains(info.ServerURIs, r.servers.Server(1-i).ApplicationURI()) {
			t.Fatalf("server %s: %+v", s.Name(), info)
		}
	}
	if st.Redundancy.SameServer || st.Redundancy.Problem != "" || len(st.Redundancy.Warnings) != 0 {
		t.Fatalf("a redundant set: %+v", st.Redundancy)
	}
	if v, ok := st.StandbyLevel.Value(); !ok || v != 240 {
		t.Fatalf("standby level %v, want 240", st.StandbyLevel)
	}
	for _, k := range []uaclient.EventKind{uaclient.EventSameServer, uaclient.EventRedundancyWarning} {
		if evs := r.eventsSince(mark{}, k); len(evs) > 0 {
			t.Fatalf("%s: %v", k, evs[0])
		}
	}
	// The event reaches the handler after the status says the session is
	// up: wait for it.
	up := r.waitEvent(mark{}, "the standby session's event", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventSessionUp && e.Role == uaclient.RoleStandby
	})
	if !strings.Contains(up.Message, "(standby, ServiceLevel 240") {
		t.Fatalf("standby session up: %v", up)
	}
}

// TestPairRedundancyWarnings: servers without redundancy, and servers of
// two different sets, are warned of once each, and the pair works on with
// its standby counted. The same servers behind one endpoint are not
// checked at all.
func TestPairRedundancyWarnings(t *testing.T) {
	for _, tc := range []struct {
		name string
		// otherSet: the backup is server B of another redundant set.
		otherSet bool
		servers  []uaserver.Option
		want     []string // a part of each warning
	}{
		{name: "RedundancySupport None", servers: []uaserver.Option{uaserver.WithRedundancySupport(ua.RedundancySupportNone)},
			want: []string{"the primary (opc.tcp://", "the backup (opc.tcp://", "reports RedundancySupport None"}},
		{name: "two redundant sets", otherSet: true,
			want: []string{"without backup's ApplicationUri urn:other:B", "without primary's ApplicationUri urn:apbridge:testcluster:opcua:A"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var backup *uaserver.Server
			o := rigOption{levels: [2]byte{250, 240}, servers: tc.servers}
			if tc.otherSet {
				o.endpoints = func(t *testing.T, s *uaserver.Pair) []string {
					other, err := uaserver.StartPair(t.Context(), uaserver.WithApplicationURIs("urn:other:A", "urn:other:B"))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(other.Close)
					backup = other.B()
					return []string{s.A().Endpoint(), backup.Endpoint()}
				}
			}
			r := newRig(t, o)
			if backup == nil {
				backup = r.servers.B()
			}
			st := r.waitStatus("two warnings", func(st uaclient.PairStatus) bool { return len(st.Redundancy.Warnings) == 2 })
			all := strings.Join(st.Redundancy.Warnings, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("warnings %q do not say %q", st.Redundancy.Warnings, w)
				}
			}
			// The status is set before the events reach the handler.
			testutil.WaitFor(t, "a warning event per warning", 10*time.Second, func() bool {
				return len(r.eventsSince(mark{}, uaclient.EventRedundancyWarning)) >= len(st.Redundancy.Warnings)
			})
			var reasons []string
			for _, e := range r.eventsSince(mark{}, uaclient.EventRedundancyWarning) {
				reasons = append(reasons, e.Reason)
				if !strings.HasPrefix(e.Reason, "the "+e.Endpoint.String()+" (") || e.URL != r.pair.Settings().Endpoints[e.Endpoint] {
					t.Errorf("warning event on the %s (%s): %q", e.Endpoint, e.URL, e.Reason)
				}
			}
			slices.Sort(reasons)
			if want := slices.Sorted(slices.Values(st.Redundancy.Warnings)); !slices.Equal(reasons, want) {
				t.Fatalf("warning events %q, want one per warning %q", reasons, want)
			}
			if st.Redundancy.SameServer || !st.Connected || !st.StandbyLevel.Known() {
				t.Fatalf("a warning stops nothing: same server %v, connected %v, standby level %v",
					st.Redundancy.SameServer, st.Connected, st.StandbyLevel)
			}
			// Once: a new standby session finds the same, and says nothing.
			m := r.mark()
			backup.ResetConns()
			r.waitEvent(m, "the standby up again", func(e uaclient.Event) bool {
				return e.Kind == uaclient.EventSessionUp && e.Role == uaclient.RoleStandby
			})
			if evs := r.eventsSince(m, uaclient.EventRedundancyWarning); len(evs) > 0 {
				t.Fatalf("warned again: %v", evs[0])
			}
		})
	}

	// One endpoint on a server that reports RedundancySupport None, which
	// the case above warns of: a single server is not a pair to check.
	t.Run("single server", func(t *testing.T) {
		r := newRig(t, rigOption{levels: [2]byte{250, 240}, noStart: true,
			servers: []uaserver.Option{uaserver.WithRedundancySupport(ua.RedundancySupportNone)},
			cfg:     func(c *uaclient.PairConfig) { c.Endpoints = c.Endpoints[:1] }})
		if err := r.pair.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := r.pair.WaitReady(t.Context()); err != nil {
			t.Fatal(err)
		}
		r.waitUpdates(mark{}, 3, "data", dataFrom(servicelevel.Primary))
		st := r.pair.Status()
		if st.Servers[0].ApplicationURI != "" || st.Servers[0].RedundancyKnown || st.Redundancy.SameServer || len(st.Redundancy.Warnings) > 0 {
			t.Fatalf("a single server was checked: %+v %+v", st.Servers, st.Redundancy)
		}
		if evs := r.eventsSince(mark{}, uaclient.EventRedundancyWarning); len(evs) > 0 {
			t.Fatalf("a single server warned of: %v", evs[0])
		}
	})
}
