package opcuasource_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/bridge/sourcetest"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua/ua"
)

// startOneTagPair starts a pair of servers with one tag each, and more
// options, closed when the test ends.
func startOneTagPair(t *testing.T, ctx context.Context, opts ...uaserver.Option) *uaserver.Pair {
	t.Helper()
	servers, err := uaserver.StartPair(ctx, append([]uaserver.Option{uaserver.WithTags(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(servers.Close)
	return servers
}

// TestOPCUASourceHealthShowsRedundancy: what the Pair's check of its
// servers found is the source's health. One server behind both endpoints
// is Degraded, with no standby, though it takes writes; servers that do
// not say they are a redundant set are Connected with the warning in the
// detail; a redundant set is Connected without one. Each case waits until
// both servers were checked (Stats.Servers).
func TestOPCUASourceHealthShowsRedundancy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers []uaserver.Option
		alias   bool // the backup endpoint is a second port of server A
		state   bridge.State
		detail  string // in the detail
		not     string // not in the detail
	}{
		{name: "one server twice", alias: true, state: bridge.StateDegraded,
			detail: "no standby: the primary (opc.tcp://", not: "blips up to"},
		{name: "RedundancySupport None", servers: []uaserver.Option{uaserver.WithRedundancySupport(ua.RedundancySupportNone)},
			state: bridge.StateConnected, detail: "reports RedundancySupport None", not: "no standby"},
		{name: "a redundant set", state: bridge.StateConnected, detail: "blips up to", not: "Redundancy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			servers := startOneTagPair(t, ctx, tc.servers...)
			eps := servers.Endpoints()
			if tc.alias {
				var err error
				if eps[1], _, err = servers.A().Alias(); err != nil {
					t.Fatal(err)
				}
			}
			src, err := opcuasource.New("opc1", uaclient.PairConfig{Endpoints: eps}, opcuasource.WithLogger(testutil.Logger(t)))
			if err != nil {
				t.Fatal(err)
			}
			if err := src.Start(ctx, sourcetest.Discard{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { src.Close() })
			testutil.WaitFor(t, "both servers checked", 10*time.Second, func() bool {
				s := src.Stats().Servers
				return s[0].ApplicationURI != "" && s[1].ApplicationURI != ""
			})
			testutil.WaitFor(t, "the health "+string(tc.state), 10*time.Second, func() bool {
				h := src.Health()
				return h.State == tc.state && strings.Contains(h.Detail, tc.detail)
			})
			h := src.Health()
			if strings.Contains(h.Detail, tc.not) || !h.Writable || h.Level != int(uaserver.LevelPrimary) {
				t.Fatalf("health %+v", h)
			}
			if rc := src.Stats().Redundancy; rc.SameServer != tc.alias {
				t.Fatalf("stats: %+v", rc)
			}
		})
	}
}
