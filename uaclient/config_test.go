package uaclient

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/servicelevel"

	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

func TestPairConfigDefaults(t *testing.T) {
	s, err := PairConfig{Endpoints: []string{"opc.tcp://a:4840", "opc.tcp://b:4840"}}.Settings()
	if err != nil {
		t.Fatal(err)
	}
	want := PairSettings{
		Endpoints:          [2]string{"opc.tcp://a:4840", "opc.tcp://b:4840"},
		Mode:               ModeWarm,
		HeartbeatInterval:  50 * time.Millisecond,
		HeartbeatTimeout:   600 * time.Millisecond,
		PollInterval:       time.Second,
		ReadTimeout:        500 * time.Millisecond,
		PublishingInterval: 100 * time.Millisecond,
		SamplingInterval:   100 * time.Millisecond,
		QueueSize:          0, // each item's own: QueueSizeFor
		DiscardOldest:      true,
		BatchSize:          500,
		BlipTolerance:      30 * time.Second,
		TakeoverWindow:     10 * time.Second,
	}
	want.Failover, _ = servicelevel.FailoverConfig{}.Settings()
	if s != want {
		t.Fatalf("defaults:\n got %+v\nwant %+v", s, want)
	}
	// The heartbeat timeout follows a slower heartbeat, and the sampling
	// interval the publishing interval.
	s, err = PairConfig{Endpoints: []string{"opc.tcp://a", "opc.tcp://b"}, HeartbeatIntervalMilliseconds: new(1000),
		PublishingIntervalMilliseconds: new(250), Mode: ModeHot, SamplingIntervalMilliseconds: new(0)}.Settings()
	if err != nil || s.HeartbeatTimeout != 2*time.Second || s.SamplingInterval != 0 || s.PublishingInterval != 250*time.Millisecond || s.Mode != ModeHot {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestPairConfigValidation(t *testing.T) {
	ok := []string{"opc.tcp://a:4840", "opc.tcp://b:4840"}
	for _, tc := range []struct {
		name string
		cfg  PairConfig
		want []string // every line of the error
	}{
		{"no endpoint", PairConfig{}, []string{"endpoints: 0 given, want 1 (one server) or 2 (primary, backup)"}},
		{"three endpoints", PairConfig{Endpoints: append(ok, "opc.tcp://c:4840")},
			[]string{"endpoints: 3 given, want 1 (one server) or 2 (primary, backup)"}},
		{"one endpoint, hot", PairConfig{Endpoints: ok[:1], Mode: ModeHot},
			[]string{"mode: hot keeps the data items on a standby server: it needs two endpoints, or discoverPartner"}},
		{"discoverPartner with two endpoints", PairConfig{Endpoints: ok, DiscoverPartner: true},
			[]string{"discoverPartner: finds the backup of a source with one endpoint, and endpoints gives two: " +
				"remove discoverPartner (the backup is endpoints[1]) or endpoints[1] (to find the backup)"}},
		{"one bad endpoint", PairConfig{Endpoints: []string{"http://a"}}, []string{`endpoints[0]: "http://a" is not an opc.tcp:// URL`}},
		{"same URL", PairConfig{Endpoints: []string{"opc.tcp://a:4840", "OPC.TCP://A/"}},
			[]string{"endpoints[1]: reaches the same server as endpoints[0]: same host and port (the same URL, opc.tcp://a:4840); the backup must be another server"}},
		{"loopback spellings", PairConfig{Endpoints: []string{"opc.tcp://127.0.0.1:4840", "opc.tcp://localhost:4840"}},
			[]string{"endpoints[1]: reaches the same server as endpoints[0]: same host and port (127.0.0.1 and localhost both name this machine; port 4840); the backup must be another server"}},
		{"two paths", PairConfig{Endpoints: []string{"opc.tcp://plc-a:4840/UA/Server", "opc.tcp://PLC-A:4840/UA/Other"}},
			[]string{"endpoints[1]: reaches the same server as endpoints[0]: same host and port (plc-a:4840; the path does not choose the server); the backup must be another server"}},
		{"bad URLs", PairConfig{Endpoints: []string{" ", "http://b:80"}}, []string{
			"endpoints[0]: empty: want an opc.tcp://host:port URL",
			`endpoints[1]: "http://b:80" is not an opc.tcp:// URL`}},
		{"no host", PairConfig{Endpoints: []string{"opc.tcp://a", "opc.tcp://:4840"}}, []string{`endpoints[1]: "opc.tcp://:4840" has no host`}},
		{"mode", PairConfig{Endpoints: ok, Mode: "cold"}, []string{`mode: "cold" is not valid (valid: warm, hot, prepared)`}},
		{"filter", PairConfig{Endpoints: ok, Filter: &DataChangeFilter{Trigger: "always", DeadbandType: "relative", DeadbandValue: 1}},
			[]string{`filter.trigger: "always" is not valid (valid: status, statusValue, statusValueTimestamp)`,
				`filter.deadbandType: "relative" is not valid (valid: none, absolute, percent)`}},
		{"percent deadband", PairConfig{Endpoints: ok, Filter: &DataChangeFilter{DeadbandType: "percent", DeadbandValue: 150}},
			[]string{"filter.deadbandValue: 150 is out of range (valid 0-100, percent of the node's EURange)"}},
		{"absolute deadband", PairConfig{Endpoints: ok, Filter: &DataChangeFilter{DeadbandType: "absolute", DeadbandValue: -1}},
			[]string{"filter.deadbandValue: -1 is out of range (valid: 0 or more, in the value's units)"}},
		{"deadband value alone", PairConfig{Endpoints: ok, Filter: &DataChangeFilter{DeadbandValue: 2}},
			[]string{"filter.deadbandValue: set without a deadbandType (valid: absolute, percent)"}},
		{"batch size", PairConfig{Endpoints: ok, SubscribeBatchSize: new(0)},
			[]string{"subscribeBatchSize: 0 is out of range (valid 1-10000)"}},
		{"blip tolerance", PairConfig{Endpoints: ok, BlipToleranceMilliseconds: new(3600001)},
			[]string{"blipToleranceMilliseconds: 3600001 is out of range (valid 0-3600000)"}},
		{"ranges", PairConfig{Endpoints: ok,
			HeartbeatIntervalMilliseconds:  new(5),
			PollIntervalMilliseconds:       new(0),
			ReadTimeoutMilliseconds:        new(60001),
			PublishingIntervalMilliseconds: new(0),
			SamplingIntervalMilliseconds:   new(-1),
			QueueSize:                      new(0),
		}, []string{
			"heartbeatIntervalMilliseconds: 5 is out of range (valid 10-10000)",
			"pollIntervalMilliseconds: 0 is out of range (valid 10-600000)",
			"readTimeoutMilliseconds: 60001 is out of range (valid 10-60000)",
			"publishingIntervalMilliseconds: 0 is out of range (valid 1-600000)",
			"samplingIntervalMilliseconds: -1 is out of range (valid 0-600000)",
			"queueSize: 0 is out of range (valid 1-65536)",
		}},
		{"gap shorter than two heartbeats", PairConfig{Endpoints: ok, HeartbeatIntervalMilliseconds: new(500), HeartbeatTimeoutMilliseconds: new(900)},
			[]string{"heartbeatTimeoutMilliseconds: 900 is out of range (valid 1000-600000)"}},
		{"failover fields keep their paths", PairConfig{Endpoints: ok,
			FailoverConfig: servicelevel.FailoverConfig{ServiceLevelFailover: &servicelevel.ServiceLevelFailover{DegradedWindowSeconds: new(0)}}},
			[]string{"serviceLevelFailover.degradedWindowSeconds: 0 is out of range (valid 1-3600)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("error:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
			var fe *servicelevel.FieldError
			var ve *ValueError
			if !errors.As(err, &fe) && !errors.As(err, &ve) {
				t.Fatalf("%T is neither a *FieldError nor a *ValueError", err)
			}
			if _, err := NewPair(tc.cfg); err == nil {
				t.Fatal("NewPair accepted it")
			}
		})
	}
}

func TestPairOptionsValidate(t *testing.T) {
	cfg := PairConfig{Endpoints: []string{"opc.tcp://a:4840", "opc.tcp://b:4840"}}
	for _, tc := range []struct {
		name string
		opt  PairOption
		want string
	}{
		{"empty name", WithPairName(""), "uaclient: pair name: must not be empty"},
		{"endpoint 7", WithEndpointClientOptions(servicelevel.Endpoint(7)), "uaclient: endpoint client options: Endpoint(7) is not an endpoint"},
		{"backlog 15", WithBacklog(15), "uaclient: backlog: 15 is out of range"},
	} {
		if _, err := NewPair(cfg, WithLogger(zerolog.Nop()), tc.opt); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q...", tc.name, err, tc.want)
		}
	}
	// The option's own error stays reachable through the wrap.
	errOwn := errors.New("own")
	if _, err := NewPair(cfg, func(*options) error { return errOwn }); !errors.Is(err, errOwn) || err.Error() != "uaclient: own" {
		t.Fatalf("an option's error: %v", err)
	}
	p, err := NewPair(cfg, nil, WithPairName("line-3"))
	if err != nil {
		t.Fatal(err)
	}
	// Never started: Close has nothing to wait for, and the Pair is done.
	p.Close()
	if err := p.Start(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	if _, err := p.Write(t.Context(), 1, 1.0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
}

// stale drops what a snapshot already gave (the same sample again) and
// what predates it; a newer sample, or a status change of the same one
// taken after the snapshot, passes.
func TestStaleAfterSnapshot(t *testing.T) {
	t0 := time.Date(2026, 11, 13, 13, 52, 0, 0, time.UTC)
	dv := func(v any, st ua.StatusCode, src time.Time) *ua.DataValue {
		d := &ua.DataValue{Value: ua.MustVariant(v), Status: st, SourceTimestamp: src}
		d.UpdateMask()
		return d
	}
	withServer := func(d *ua.DataValue, at time.Time) *ua.DataValue {
		d.ServerTimestamp = at
		d.UpdateMask()
		return d
	}
	snap := dv(int64(7), ua.StatusOK, t0)
	// Read 50 ms after the server sampled the tick: the same tick's Bad
	// sample a Hot standby queued before its level rose predates it.
	snapRead := withServer(dv(int64(7), ua.StatusOK, t0), t0.Add(50*time.Millisecond))
	noTS := dv(int64(7), ua.StatusOK, time.Time{})
	for _, tc := range []struct {
		name string
		dv   *ua.DataValue
		f    *ua.DataValue
		want bool
	}{
		{"same sample", dv(int64(7), ua.StatusOK, t0), snap, true},
		{"older sample", dv(int64(6), ua.StatusOK, t0.Add(-100*time.Millisecond)), snap, true},
		{"newer sample", dv(int64(8), ua.StatusOK, t0.Add(100*time.Millisecond)), snap, false},
		{"status change of the same sample", dv(int64(7), ua.StatusBadOutOfService, t0), snap, false},
		{"status change taken before the snapshot's read", withServer(dv(int64(7), ua.StatusBadOutOfService, t0), t0.Add(10*time.Millisecond)), snapRead, true},
		{"status change taken after the snapshot's read", withServer(dv(int64(7), ua.StatusBadOutOfService, t0), t0.Add(60*time.Millisecond)), snapRead, false},
		{"no source timestamp, same value and status", dv(int64(7), ua.StatusOK, time.Time{}), noTS, true},
		{"no source timestamp, new value", dv(int64(8), ua.StatusOK, time.Time{}), noTS, false},
		{"no source timestamp, new status", dv(int64(7), ua.StatusBadOutOfService, time.Time{}), noTS, false},
		{"no value either", &ua.DataValue{Status: ua.StatusBadNoData}, &ua.DataValue{Status: ua.StatusBadNoData}, true},
	} {
		if got := stale(tc.dv, tc.f); got != tc.want {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSameEndpoint(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"opc.tcp://plc-a:4840", "opc.tcp://plc-a:4840", true},
		{"opc.tcp://PLC-A:4840/", "opc.tcp://plc-a:4840", true},
		{"OPC.TCP://plc-a", "opc.tcp://plc-a:4840", true},
		{" opc.tcp://plc-a:4840 ", "opc.tcp://plc-a:4840", true},
		{"opc.tcp://plc-a:4840/UA/Server", "opc.tcp://plc-a:4840/UA/Server/", true},
		{"opc.tcp://plc-a:4840", "opc.tcp://plc-b:4840", false},
		{"opc.tcp://plc-a:4840", "opc.tcp://plc-a:4841", false},
		{"opc.tcp://plc-a:4840/UA/Server", "opc.tcp://plc-a:4840/UA/Other", true},
		{"opc.tcp://plc-a.:4840", "opc.tcp://plc-a:4840", true},
		{"opc.tcp://[::1]:4840", "opc.tcp://[::1]", true},
		// Every loopback spelling is this machine.
		{"opc.tcp://127.0.0.1:4840", "opc.tcp://localhost:4840", true},
		{"opc.tcp://LOCALHOST:4840", "opc.tcp://[::1]:4840", true},
		{"opc.tcp://127.0.0.1:4840", "opc.tcp://127.1.2.3:4840/other", true},
		{"opc.tcp://[0:0:0:0:0:0:0:1]:4840", "opc.tcp://127.0.0.1", true},
		{"opc.tcp://127.0.0.1:4840", "opc.tcp://localhost:4841", false},
		{"opc.tcp://127.0.0.1:4840", "opc.tcp://10.0.0.1:4840", false},
		// An IP address compares by value.
		{"opc.tcp://[::ffff:10.1.2.3]:4840", "opc.tcp://10.1.2.3:4840", true},
		{"opc.tcp://10.1.2.3:4840", "opc.tcp://10.1.2.4:4840", false},
		{"not a url", "NOT A URL", true},
		{"not a url", "opc.tcp://a:4840", false},
	}
	for _, tt := range tests {
		if got := SameEndpoint(tt.a, tt.b); got != tt.want {
			t.Errorf("SameEndpoint(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
