package uaclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/rs/zerolog"
)

// Partner discovery on real servers: a Pair given server A alone finds B
// through A (FindServers, then GetEndpoints on B), or runs on A alone and
// says why.

// discoverRig starts a Pair on A alone with DiscoverPartner; the servers
// answer FindServers as opts make them. It does not wait for a standby.
func discoverRig(t *testing.T, logs *testutil.SyncBuffer, servers []uaserver.Option, mode uaclient.Mode, opts ...uaclient.PairOption) *rig {
	t.Helper()
	if logs != nil {
		opts = append(opts, uaclient.WithLogger(zerolog.New(logs)))
	}
	r := newRig(t, rigOption{levels: [2]byte{250, 240}, noStart: true, servers: servers, opts: opts,
		endpoints: func(_ *testing.T, s *uaserver.Pair) []string { return []string{s.A().Endpoint()} },
		cfg:       func(c *uaclient.PairConfig) { c.DiscoverPartner, c.Mode = true, mode },
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := r.pair.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.pair.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// logLines returns the lines of logs whose event is ev.
func logLines(logs *testutil.SyncBuffer, ev string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"event":"`+ev+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// TestPairDiscoversPartner: A names B and knows B's endpoint. The Pair
// finds B, logs it once, shows it in its status, keeps a standby session
// on it, and fails over to it when A is killed: the data then come from
// B. In prepared mode the items wait on the standby found, as on a
// configured one.
func TestPairDiscoversPartner(t *testing.T) {
	for _, mode := range []uaclient.Mode{uaclient.ModeWarm, uaclient.ModePrepared} {
		t.Run(string(mode), func(t *testing.T) { testPairDiscoversPartner(t, mode) })
	}
}

func testPairDiscoversPartner(t *testing.T, mode uaclient.Mode) {
	logs := &testutil.SyncBuffer{}
	r := discoverRig(t, logs, []uaserver.Option{uaserver.WithPartnerDiscovery()}, mode)
	a, b := r.servers.A(), r.servers.B()
	found := r.waitEvent(mark{}, "the partner found", kind(uaclient.EventPartnerFound))
	if found.URL != b.Endpoint() || found.ApplicationURI != b.ApplicationURI() || found.Endpoint != servicelevel.Backup {
		t.Fatalf("found %+v, want B (%s, %s)", found, b.Endpoint(), b.ApplicationURI())
	}
	r.waitBothUp()
	st := r.pair.Status()
	if p := st.Partner; !p.Enabled || p.URL != b.Endpoint() || p.ApplicationURI != b.ApplicationURI() || p.Problem != "" || p.Attempts != 1 {
		t.Fatalf("partner status %+v", p)
	}
	if st.Servers[0].ApplicationURI != a.ApplicationURI() || st.Servers[1].ApplicationURI != b.ApplicationURI() ||
		st.Redundancy.SameServer || len(st.Redundancy.Warnings) > 0 {
		t.Fatalf("servers %+v, redundancy %+v", st.Servers, st.Redundancy)
	}
	if lines := logLines(logs, "partner found"); len(lines) != 1 || !strings.Contains(lines[0], b.Endpoint()) ||
		!strings.Contains(lines[0], `"level":"info"`) {
		t.Fatalf("partner-found log lines %q, want one at info naming %s", lines, b.Endpoint())
	}
	if n := len(r.eventsSince(mark{}, uaclient.EventPartnerNotFound)); n != 0 {
		t.Fatalf("%d partner-not-found events", n)
	}

	// The standby's items: none in warm mode (the health subscription's
	// two only), all of them in prepared mode.
	want := 2
	if mode == uaclient.ModePrepared {
		want += testTags
	}
	testutil.WaitFor(t, "the standby's items on B", waitLong, func() bool {
		n := 0
		for _, sub := range b.Subscriptions() {
			n += sub.Items
		}
		return n == want
	})

	m := r.mark()
	a.Kill()
	r.waitEvent(m, "a failover to the discovered backup", failoverTo(servicelevel.Backup))
	r.waitEvent(m, "the backup carrying the data", activeUp(servicelevel.Backup))
	r.waitUpdates(m, 2*testTags, "data changes from B", dataFrom(servicelevel.Backup))
	if st := r.pair.Status(); st.ActiveURL != b.Endpoint() || !st.Connected {
		t.Fatalf("after the failover: active %s (%v), want B %s", st.ActiveURL, st.Connected, b.Endpoint())
	}
	if n := len(r.eventsSince(mark{}, uaclient.EventPartnerFound)); n != 1 {
		t.Fatalf("%d partner-found events, want 1", n)
	}
}

// TestPairPartnerNotFound: A names B, but its FindServers does not know
// B. The Pair runs on A alone (no backup session), warns once though it
// asks again, and says which step found nothing. Once A learns B's
// endpoint (the positive control) the next discovery finds it.
func TestPairPartnerNotFound(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	r := discoverRig(t, logs, nil, uaclient.ModeWarm, uaclient.WithPartnerRetry(100*time.Millisecond))
	a, b := r.servers.A(), r.servers.B()
	nf := r.waitEvent(mark{}, "the partner not found", kind(uaclient.EventPartnerNotFound))
	want := "FindServers on " + a.Endpoint() + " does not know partner " + b.ApplicationURI()
	if !strings.Contains(nf.Reason, want) || nf.Endpoint != servicelevel.Primary || !strings.Contains(nf.Message, "running as a single server") {
		t.Fatalf("not found: %+v, want the reason %q", nf, want)
	}
	// It asks again, and says it once.
	st := r.waitStatus("three discoveries", func(st uaclient.PairStatus) bool { return st.Partner.Attempts >= 3 })
	if st.Partner.URL != "" || !strings.Contains(st.Partner.Problem, want) || st.Sessions[1] != uaclient.SessionDown || !st.Connected {
		t.Fatalf("status %+v", st)
	}
	if n := len(r.eventsSince(mark{}, uaclient.EventPartnerNotFound)); n != 1 {
		t.Fatalf("%d partner-not-found events, want 1", n)
	}
	if lines := logLines(logs, "partner not found"); len(lines) != 1 || !strings.Contains(lines[0], `"level":"warn"`) {
		t.Fatalf("partner-not-found log lines %q, want one warning", lines)
	}
	if evs := r.eventsSince(mark{}, uaclient.EventConnecting); len(evs) != 1 || evs[0].Endpoint != servicelevel.Primary {
		t.Fatalf("connect attempts %d, want only the primary's", len(evs))
	}

	a.SetPartner(b.ApplicationURI(), b.Endpoint())
	found := r.waitEvent(mark{}, "the partner found once A knows it", kind(uaclient.EventPartnerFound))
	if found.URL != b.Endpoint() {
		t.Fatalf("found %s, want %s", found.URL, b.Endpoint())
	}
	r.waitBothUp()
	if p := r.pair.Status().Partner; p.Problem != "" || p.URL != b.Endpoint() {
		t.Fatalf("partner status %+v", p)
	}
}

// TestPairPartnerIsTheServer: A describes its partner at an address that
// reaches A itself. The discovered endpoint is refused as a configured
// backup would be: by host and port, or by the ApplicationUri its
// endpoint description names. The Pair runs on A alone; pointing the
// partner at B (the positive control) gives a backup.
func TestPairPartnerIsTheServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T, a *uaserver.Server) string
		why  string
	}{
		{"same host and port", func(_ *testing.T, a *uaserver.Server) string {
			return strings.Replace(a.Endpoint(), "127.0.0.1", "localhost", 1)
		}, "reaches the configured server: same host and port"},
		{"a port forward to it", func(t *testing.T, a *uaserver.Server) string {
			url, _, err := a.Alias()
			if err != nil {
				t.Fatal(err)
			}
			return url
		}, "is the configured server's own (ApplicationUri urn:apbridge:testcluster:opcua:A): the same server, no backup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOption{levels: [2]byte{250, 240}, noStart: true,
				endpoints: func(_ *testing.T, s *uaserver.Pair) []string { return []string{s.A().Endpoint()} },
				cfg:       func(c *uaclient.PairConfig) { c.DiscoverPartner = true },
				opts:      []uaclient.PairOption{uaclient.WithPartnerRetry(100 * time.Millisecond)},
			})
			a, b := r.servers.A(), r.servers.B()
			a.SetPartner(b.ApplicationURI(), tc.url(t, a))
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			if err := r.pair.Start(ctx); err != nil {
				t.Fatal(err)
			}
			nf := r.waitEvent(mark{}, "the partner refused", kind(uaclient.EventPartnerNotFound))
			if !strings.Contains(nf.Reason, tc.why) {
				t.Fatalf("reason %q, want %q", nf.Reason, tc.why)
			}
			if st := r.pair.Status(); st.Partner.URL != "" || st.Sessions[1] != uaclient.SessionDown {
				t.Fatalf("a backup on A itself: %+v", st)
			}
			a.SetPartner(b.ApplicationURI(), b.Endpoint())
			if e := r.waitEvent(mark{}, "the partner found", kind(uaclient.EventPartnerFound)); e.URL != b.Endpoint() {
				t.Fatalf("found %s, want B %s", e.URL, b.Endpoint())
			}
			r.waitBothUp()
			if st := r.pair.Status(); st.Redundancy.SameServer {
				t.Fatalf("B is A: %+v", st.Redundancy)
			}
		})
	}
}
