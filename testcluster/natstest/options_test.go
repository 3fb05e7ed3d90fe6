package natstest

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestOptionsCommon: WithLogger, WithClientRTT and WithReadyTimeout set
// what uaserver's options of the same names set, latency puts proxies in
// front of the nodes, and a nil Option is skipped.
func TestOptionsCommon(t *testing.T) {
	l := zerolog.New(io.Discard).Level(zerolog.WarnLevel)
	c, err := newConfig([]Option{nil, WithLogger(l), WithClientRTT(40 * time.Millisecond), WithReadyTimeout(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Logger.GetLevel() != zerolog.WarnLevel || c.Delay != 20*time.Millisecond || c.ReadyWait != 3*time.Second {
		t.Errorf("logger level %v, one-way delay %v, ready timeout %v", c.Logger.GetLevel(), c.Delay, c.ReadyWait)
	}
	// Latency on a NATS cluster needs the proxies it goes through.
	if !c.proxies {
		t.Error("WithClientRTT did not put proxies in front of the NATS nodes")
	}
	if c, _ := newConfig(nil); c.proxies || c.ReadyWait != 30*time.Second {
		t.Errorf("defaults: proxies %v, ready timeout %v", c.proxies, c.ReadyWait)
	}
}

// TestOptionsRejectBadValues: a value no server could use fails Start
// with an error that names the option, before it starts anything
// (TestMain's leak check would see a started server).
func TestOptionsRejectBadValues(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bad := map[string]Option{
		"WithClientRTT":       WithClientRTT(-time.Millisecond),
		"WithReadyTimeout":    WithReadyTimeout(0),
		"WithNodes":           WithNodes(0),
		"WithLeafCompression": WithLeafCompression("s2"),
	}
	for name, o := range bad {
		c, err := Start(ctx, o)
		if c != nil {
			c.Close()
		}
		if err == nil || !strings.HasPrefix(err.Error(), "natstest: "+name+"(") {
			t.Errorf("Start with a bad %s: %v", name, err)
		}
	}
}
