package mxsource_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/bridge/sourcetest"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/mxsim"
)

// The gateway source passes the source conformance suite on a pair of
// simulated gateways.
func TestConformance(t *testing.T) {
	_, conn := testutil.ClusterConn(t)
	sourcetest.Run(t, sourcetest.Harness{Conn: conn, Servers: startConformanceGateways})
}

// mxServers is a gateway pair sharing one data source, both gateways
// killed when it is to start down.
type mxServers struct {
	gw []*mxsim.Gateway
}

func startConformanceGateways(t *testing.T, up bool) sourcetest.Servers {
	data := mxsim.NewData()
	t.Cleanup(data.RunCounters("Counter_", 2, 50*time.Millisecond))
	s := &mxServers{}
	for range 2 {
		g, err := mxsim.Start(data)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		if !up {
			g.Kill()
		}
		s.gw = append(s.gw, g)
	}
	return s
}

func (s *mxServers) NewSource(t *testing.T, name string) bridge.Source {
	cfg := mxsource.Config{Endpoints: []string{s.gw[0].Addr(), s.gw[1].Addr()}, ReconnectDelay: 50 * time.Millisecond}
	src, err := mxsource.New(name, cfg, mxsource.WithLogger(testutil.Logger(t).With().Str("source", name).Logger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func (s *mxServers) Tags() []bridge.TagConfig {
	var tags []bridge.TagConfig
	for i := range 2 {
		tags = append(tags, bridge.TagConfig{Name: fmt.Sprintf("c%d", i), Address: fmt.Sprintf("Counter_%d.Value", i)})
	}
	return tags
}

func (s *mxServers) Up(t *testing.T) {
	for _, g := range s.gw {
		if err := g.Restart(); err != nil {
			t.Fatal(err)
		}
	}
}
