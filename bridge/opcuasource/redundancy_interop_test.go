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
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua/ua"
)

// TestRedundantSetInterop checks pairs against what servers we did not
// write say of themselves: node-opcua servers a and b describe themselves
// as one Warm set, c keeps node-opcua's defaults (RedundancySupport None,
// an empty ServerUriArray). The pair of a and a second port of a is one
// server; a and b are a redundant set, which gives no warning (both were
// checked: their URIs are in Stats); a and c are two servers that are not
// one set.
func TestRedundantSetInterop(t *testing.T) {
	nodeopcua.Require(t)
	set := []string{"urn:apbridge:interop:set:a", "urn:apbridge:interop:set:b"}
	cfgs := []nodeopcua.Config{
		{ApplicationURI: set[0], RedundancySupport: "Warm", ServerURIs: set, PKI: t.TempDir()},
		{ApplicationURI: set[1], RedundancySupport: "Warm", ServerURIs: set, PKI: t.TempDir()},
		{PKI: t.TempDir()},
	}
	// node-opcua takes seconds to start: the three start at once.
	srv := make([]*nodeopcua.Server, len(cfgs))
	errs := make([]error, len(cfgs))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
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
	a, b, c := srv[0], srv[1], srv[2]
	proxy, err := faultproxy.New(strings.TrimPrefix(a.Endpoint, "opc.tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })

	for _, tc := range []struct {
		name      string
		endpoints []string
		state     bridge.State
		detail    []string // in the detail
		not       string   // not in the detail
	}{
		{"one server twice", []string{a.Endpoint, "opc.tcp://" + proxy.Addr()}, bridge.StateDegraded,
			[]string{"no standby", "report one ApplicationUri, " + set[0]}, "RedundancySupport"},
		{"a redundant set", []string{a.Endpoint, b.Endpoint}, bridge.StateConnected, nil, "redundan"},
		{"not one set", []string{a.Endpoint, c.Endpoint}, bridge.StateConnected,
			[]string{"the backup (" + c.Endpoint + ") reports RedundancySupport None", "without backup's ApplicationUri " + c.ApplicationURI},
			"no standby"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := opcuasource.New("interop", uaclient.PairConfig{Endpoints: tc.endpoints}, opcuasource.WithLogger(testutil.Logger(t)))
			if err != nil {
				t.Fatal(err)
			}
			if err := src.Start(ctx, sourcetest.Discard{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { src.Close() })
			testutil.WaitFor(t, "both servers checked", 15*time.Second, func() bool {
				s := src.Stats().Servers
				return s[0].ApplicationURI != "" && s[1].ApplicationURI != ""
			})
			testutil.WaitFor(t, "the health "+string(tc.state), 15*time.Second, func() bool {
				h := src.Health()
				if h.State != tc.state {
					return false
				}
				for _, d := range tc.detail {
					if !strings.Contains(h.Detail, d) {
						return false
					}
				}
				return true
			})
			if h := src.Health(); strings.Contains(h.Detail, tc.not) || !h.Writable {
				t.Fatalf("health %+v", h)
			}
			st := src.Stats()
			if st.Servers[0].ApplicationURI != set[0] || st.Servers[0].Redundancy != ua.RedundancySupportWarm {
				t.Fatalf("a said %+v", st.Servers[0])
			}
			if (tc.state == bridge.StateDegraded) != st.Redundancy.SameServer {
				t.Fatalf("check %+v", st.Redundancy)
			}
		})
	}
}
