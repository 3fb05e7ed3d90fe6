package opcuasource_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/bridge/sourcetest"
	"github.com/apbridge/apbridge/internal/nodeopcua"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
)

// startDiscovering starts a source on url alone that discovers its
// partner, with the given security.
func startDiscovering(t *testing.T, ctx context.Context, url string, sec opcuasource.Security) *opcuasource.Source {
	t.Helper()
	secOpts, err := sec.PairOptions(testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	src, err := opcuasource.New("opc1", uaclient.PairConfig{Endpoints: []string{url}, DiscoverPartner: true},
		opcuasource.WithLogger(testutil.Logger(t)), opcuasource.WithPairOptions(secOpts...))
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx, sourcetest.Discard{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// TestOPCUASourceHealthShowsPartner: the source's health says what
// partner discovery found: the backup, or, in front, that there is none
// and why. Either way the source is Connected and takes writes: a single
// server whose partner is not found works on.
func TestOPCUASourceHealthShowsPartner(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers []uaserver.Option
		detail  func(b *uaserver.Server) string
	}{
		{"found", []uaserver.Option{uaserver.WithPartnerDiscovery()}, func(b *uaserver.Server) string {
			return "backup " + b.Endpoint() + " found by partner discovery (" + b.ApplicationURI() + ")"
		}},
		{"not found", nil, func(b *uaserver.Server) string {
			return "no backup: partner discovery found none: FindServers on "
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			servers := startOneTagPair(t, ctx, tc.servers...)
			src := startDiscovering(t, ctx, servers.A().Endpoint(), opcuasource.Security{})
			want := tc.detail(servers.B())
			testutil.WaitFor(t, "the health detail "+want, 10*time.Second, func() bool {
				h := src.Health()
				return h.State == bridge.StateConnected && strings.Contains(h.Detail, want)
			})
			h := src.Health()
			if !h.Writable || h.Endpoint != servers.A().Endpoint() || tc.servers == nil && !strings.HasPrefix(h.Detail, want) {
				t.Fatalf("health %+v (a missing backup must lead the detail)", h)
			}
			if p := src.Stats().Partner; !p.Enabled || (p.URL != "") != (tc.servers != nil) {
				t.Fatalf("stats: %+v", p)
			}
		})
	}
}

// TestPartnerDiscoveryInterop: node-opcua servers a and b are one Warm
// set; a's FindServers knows b (the harness adds it, as an LDS would a
// registered server), lonely's does not know its partner. A source given
// lonely alone runs on it and says FindServers does not know the partner;
// one given a alone finds b, with the security settings' endpoint
// (Basic256Sha256, SignAndEncrypt; b offers no None one), and fails over
// to b when a is killed.
func TestPartnerDiscoveryInterop(t *testing.T) {
	nodeopcua.Require(t)
	policies, modes := []string{"None", "Basic256Sha256"}, []string{"None", "Sign", "SignAndEncrypt"}
	set := []string{"urn:apbridge:interop:pd:a", "urn:apbridge:interop:pd:b"}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// b offers secure endpoints only: the source's security settings
	// choose among them (the default choice, security None, finds none).
	b := nodeopcua.StartT(t, nodeopcua.Config{ApplicationURI: set[1], RedundancySupport: "Warm", ServerURIs: set,
		ServiceLevel: 240, Policies: []string{"Basic256Sha256"}, Modes: []string{"Sign", "SignAndEncrypt"}})
	cfgs := []nodeopcua.Config{
		{ApplicationURI: set[0], RedundancySupport: "Warm", ServerURIs: set, ServiceLevel: 250, Policies: policies, Modes: modes,
			Partners: []nodeopcua.Partner{{ApplicationURI: set[1], DiscoveryURLs: []string{b.Endpoint}}}, PKI: t.TempDir()},
		{ApplicationURI: "urn:apbridge:interop:pd:lonely", ServerURIs: []string{"urn:apbridge:interop:pd:lonely", set[1]}, PKI: t.TempDir()},
	}
	srv := make([]*nodeopcua.Server, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() { srv[i], errs[i] = nodeopcua.Start(ctx, cfg) })
	}
	wg.Wait()
	for _, s := range srv {
		if s != nil {
			t.Cleanup(s.Close)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	a, lonely := srv[0], srv[1]

	t.Run("not found", func(t *testing.T) {
		src := startDiscovering(t, ctx, lonely.Endpoint, opcuasource.Security{})
		want := "FindServers on " + lonely.Endpoint + " does not know partner " + set[1]
		// The stats are read live, the health when the Pair reports a
		// change: wait for both.
		testutil.WaitFor(t, "the partner not found, in the stats and the health", 30*time.Second, func() bool {
			return strings.Contains(src.Stats().Partner.Problem, want) && strings.Contains(src.Health().Detail, want)
		})
		h := src.Health()
		if h.State != bridge.StateConnected || src.Stats().Partner.URL != "" {
			t.Fatalf("health %+v, partner %+v", h, src.Stats().Partner)
		}
	})

	t.Run("found and failed over to", func(t *testing.T) {
		cert, key := clientCert(t)
		sec := opcuasource.Security{Policy: "Basic256Sha256", Mode: "SignAndEncrypt", CertFile: cert, KeyFile: key}
		src := startDiscovering(t, ctx, a.Endpoint, sec)
		testutil.WaitFor(t, "the partner found", 30*time.Second, func() bool { return src.Stats().Partner.URL != "" })
		p := src.Stats().Partner
		if p.URL != b.Endpoint || p.ApplicationURI != set[1] {
			t.Fatalf("partner %+v, want %s at %s", p, set[1], b.Endpoint)
		}
		testutil.WaitFor(t, "the standby on b checked", 30*time.Second, func() bool {
			return src.Stats().Servers[1].ApplicationURI == set[1]
		})
		a.Kill()
		testutil.WaitFor(t, "the data path on b", 60*time.Second, func() bool {
			h := src.Health()
			return h.State == bridge.StateConnected && h.Endpoint == b.Endpoint
		})
		if st := src.Stats(); st.Failovers == 0 {
			t.Fatalf("no failover: %+v", st)
		}
	})
}
