package simsource_test

import (
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/sourcetest"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The simulated source keeps the contract the real ones do, so that tests
// on it say something of them: it passes the conformance suite, its
// server brought down with Down and up with Up.
func TestConformance(t *testing.T) {
	_, conn := testutil.ClusterConn(t)
	sourcetest.Run(t, sourcetest.Harness{Conn: conn, Servers: func(t *testing.T, up bool) sourcetest.Servers {
		return &simServers{up: up}
	}})
}

// simServers is one simulated source's server: down until Up when
// started down. A source made before Up starts down.
type simServers struct {
	up  bool
	src []*simsource.Source
}

func (s *simServers) NewSource(t *testing.T, name string) bridge.Source {
	src := simsource.New(name)
	if !s.up {
		src.Down()
	}
	src.Run(50 * time.Millisecond)
	s.src = append(s.src, src)
	t.Cleanup(func() { src.Close() })
	return src
}

func (s *simServers) Tags() []bridge.TagConfig {
	return []bridge.TagConfig{{Name: "t1", Address: "sim:1"}, {Name: "t2", Address: "sim:2"}}
}

func (s *simServers) Up(*testing.T) {
	s.up = true
	for _, src := range s.src {
		src.Up()
	}
}
