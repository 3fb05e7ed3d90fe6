package opcuasource_test

import (
	"context"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/bridge/sourcetest"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
)

// The OPC UA source passes the source conformance suite on a Warm pair of
// the embedded servers.
func TestConformance(t *testing.T) {
	_, conn := testutil.ClusterConn(t)
	sourcetest.Run(t, sourcetest.Harness{Conn: conn, Servers: startConformancePair})
}

// uaServers is a Warm pair for the conformance suite, with both servers
// killed when it is to start down.
type uaServers struct {
	pair *uaserver.Pair
}

func startConformancePair(t *testing.T, up bool) sourcetest.Servers {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pair, err := uaserver.StartPair(ctx, uaserver.WithTags(2), uaserver.WithSetpoints(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pair.Close)
	if !up {
		pair.A().Kill()
		pair.B().Kill()
	}
	return &uaServers{pair: pair}
}

func (s *uaServers) NewSource(t *testing.T, name string) bridge.Source {
	src, err := opcuasource.New(name, uaclient.PairConfig{Endpoints: s.pair.Endpoints()},
		opcuasource.WithLogger(testutil.Logger(t).With().Str("source", name).Logger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func (s *uaServers) Tags() []bridge.TagConfig {
	var tags []bridge.TagConfig
	for _, tg := range s.pair.Tags() {
		tags = append(tags, bridge.TagConfig{Name: tg.Name, Address: tg.NodeID().String()})
	}
	return tags
}

func (s *uaServers) Up(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, level := range []byte{uaserver.LevelPrimary, uaserver.LevelHealthyFollower} {
		if err := s.pair.Server(i).Restart(ctx, level); err != nil {
			t.Fatal(err)
		}
	}
}
