package uaserver

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// TestOptionsCommon: WithLogger, WithClientRTT and WithReadyTimeout set
// what natstest's options of the same names set, and a nil Option is
// skipped.
func TestOptionsCommon(t *testing.T) {
	l := zerolog.New(io.Discard).Level(zerolog.WarnLevel)
	c, err := newConfig([]Option{nil, WithLogger(l), WithClientRTT(40 * time.Millisecond), WithReadyTimeout(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Logger.GetLevel() != zerolog.WarnLevel || c.Delay != 20*time.Millisecond || c.ReadyWait != 3*time.Second {
		t.Errorf("logger level %v, one-way delay %v, ready timeout %v", c.Logger.GetLevel(), c.Delay, c.ReadyWait)
	}
	if c, _ := newConfig(nil); c.ReadyWait != 10*time.Second {
		t.Errorf("default ready timeout %v", c.ReadyWait)
	}
}

// TestOptionsRejectBadValues: a value no server could use fails
// StartPair with an error that names the option, before it starts
// anything (TestMain's leak check would see a started server).
func TestOptionsRejectBadValues(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bad := map[string]Option{
		"WithClientRTT":             WithClientRTT(-time.Millisecond),
		"WithReadyTimeout":          WithReadyTimeout(0),
		"WithTags":                  WithTags(-1),
		"WithTagInterval":           WithTagInterval(time.Microsecond),
		"WithSetpoints":             WithSetpoints(-1),
		"WithHeartbeat":             WithHeartbeat(0),
		"WithRedundancySupport":     WithRedundancySupport(ua.RedundancySupportHotAndMirrored + 1),
		"WithApplicationURIs":       WithApplicationURIs("urn:same", "urn:same"),
		"WithMinPublishingInterval": WithMinPublishingInterval(0),
	}
	for name, o := range bad {
		p, err := StartPair(ctx, o)
		if p != nil {
			p.Close()
		}
		if err == nil || !strings.HasPrefix(err.Error(), "uaserver: "+name+"(") {
			t.Errorf("StartPair with a bad %s: %v", name, err)
		}
	}
}
