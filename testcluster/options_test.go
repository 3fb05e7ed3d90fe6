package testcluster

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// TestOptionsForTheOtherConstructorFail: an option that belongs to one
// constructor makes the other fail, naming the option, before it starts
// anything (TestMain's leak check would see a started server).
func TestOptionsForTheOtherConstructorFail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	natsOnly := map[string]Option{
		"WithNodes":     WithNodes(3),
		"WithJetStream": WithJetStream(),
		"WithLameDuck":  WithLameDuck(2*time.Second, time.Second),
		"WithTLS":       WithTLS(),
		"WithProxies":   WithProxies(),
		"WithDir":       WithDir(t.TempDir()),
	}
	for name, o := range natsOnly {
		p, err := StartOPCUAPair(ctx, o)
		if p != nil {
			p.Close()
		}
		want := "testcluster: " + name + " applies to a NATS cluster, not an OPC UA pair"
		if p != nil || err == nil || err.Error() != want {
			t.Errorf("StartOPCUAPair(%s): started %v, error %v; want %q", name, p != nil, err, want)
		}
	}
	opcuaOnly := map[string]Option{
		"WithTags":                  WithTags(4),
		"WithTagInterval":           WithTagInterval(time.Second),
		"WithSetpoints":             WithSetpoints(1),
		"WithHeartbeat":             WithHeartbeat(time.Second),
		"WithServiceLevels":         WithServiceLevels(250, 90),
		"WithRedundancySupport":     WithRedundancySupport(ua.RedundancySupportHot),
		"WithApplicationURIs":       WithApplicationURIs("urn:a", "urn:b"),
		"WithMinPublishingInterval": WithMinPublishingInterval(20 * time.Millisecond),
	}
	for name, o := range opcuaOnly {
		c, err := StartNATS(ctx, o)
		if c != nil {
			c.Close()
		}
		want := "testcluster: " + name + " applies to an OPC UA pair, not a NATS cluster"
		if c != nil || err == nil || err.Error() != want {
			t.Errorf("StartNATS(%s): started %v, error %v; want %q", name, c != nil, err, want)
		}
	}
}

// TestOptionsCommonToBoth: WithLogger, WithClientRTT and WithReadyTimeout
// set the same things on a NATS cluster and an OPC UA pair, and a nil
// Option is skipped.
func TestOptionsCommonToBoth(t *testing.T) {
	l := zerolog.New(io.Discard).Level(zerolog.WarnLevel)
	opts := []Option{nil, WithLogger(l), WithClientRTT(40 * time.Millisecond), WithReadyTimeout(3 * time.Second)}
	nc, err := natsOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	oc, err := opcuaOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]commonConfig{"nats": nc.commonConfig, "opcua": oc.commonConfig} {
		if c.logger.GetLevel() != zerolog.WarnLevel || c.delay != 20*time.Millisecond || c.readyWait != 3*time.Second {
			t.Errorf("%s: logger level %v, one-way delay %v, ready timeout %v", name, c.logger.GetLevel(), c.delay, c.readyWait)
		}
	}
	// Latency on a NATS cluster needs the proxies it goes through.
	if !nc.proxies {
		t.Error("WithClientRTT did not put proxies in front of the NATS nodes")
	}
	if nc, _ := natsOptions(nil); nc.proxies || nc.readyWait != 30*time.Second {
		t.Errorf("NATS defaults: proxies %v, ready timeout %v", nc.proxies, nc.readyWait)
	}
	if oc, _ := opcuaOptions(nil); oc.readyWait != 10*time.Second {
		t.Errorf("OPC UA default ready timeout %v", oc.readyWait)
	}
}

// TestOptionsRejectBadValues: a value no server could use fails the
// constructor with an error that names the option.
func TestOptionsRejectBadValues(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	both := map[string]Option{
		"WithClientRTT":    WithClientRTT(-time.Millisecond),
		"WithReadyTimeout": WithReadyTimeout(0),
	}
	natsBad := map[string]Option{"WithNodes": WithNodes(0)}
	opcuaBad := map[string]Option{
		"WithTags":                  WithTags(-1),
		"WithTagInterval":           WithTagInterval(time.Microsecond),
		"WithSetpoints":             WithSetpoints(-1),
		"WithHeartbeat":             WithHeartbeat(0),
		"WithRedundancySupport":     WithRedundancySupport(ua.RedundancySupportHotAndMirrored + 1),
		"WithApplicationURIs":       WithApplicationURIs("urn:same", "urn:same"),
		"WithMinPublishingInterval": WithMinPublishingInterval(0),
	}
	check := func(ctor, name string, err error) {
		t.Helper()
		if err == nil || !strings.HasPrefix(err.Error(), "testcluster: "+name+"(") {
			t.Errorf("%s with a bad %s: %v", ctor, name, err)
		}
	}
	for name, o := range both {
		c, err := StartNATS(ctx, o)
		if c != nil {
			c.Close()
		}
		check("StartNATS", name, err)
		p, err := StartOPCUAPair(ctx, o)
		if p != nil {
			p.Close()
		}
		check("StartOPCUAPair", name, err)
	}
	for name, o := range natsBad {
		c, err := StartNATS(ctx, o)
		if c != nil {
			c.Close()
		}
		check("StartNATS", name, err)
	}
	for name, o := range opcuaBad {
		p, err := StartOPCUAPair(ctx, o)
		if p != nil {
			p.Close()
		}
		check("StartOPCUAPair", name, err)
	}
}
