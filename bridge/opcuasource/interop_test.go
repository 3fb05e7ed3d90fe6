package opcuasource_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/internal/nodeopcua"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// secureServer is a node-opcua server that offers every policy and mode
// the relay supports, anonymous and user-name login.
func secureServer(t *testing.T, cfg nodeopcua.Config) *nodeopcua.Server {
	t.Helper()
	if cfg.Policies == nil {
		cfg.Policies = []string{"None", "Basic256Sha256", "Aes128_Sha256_RsaOaep", "Aes256_Sha256_RsaPss"}
		cfg.Modes = []string{"None", "Sign", "SignAndEncrypt"}
	}
	if cfg.Users == nil {
		cfg.Users = map[string]string{"relay": "s3cret #1"}
	}
	return nodeopcua.StartT(t, cfg)
}

// clientCert returns a client certificate and key, created in a
// directory of the test's own.
func clientCert(t *testing.T) (cert, key string) {
	t.Helper()
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	if _, err := opcuasource.EnsureClientCertificate(cert, key, "urn:apbridge:interop-test"); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// connectAndRead connects with sec's options for url and reads the
// server's state; it returns the connect or read error.
func connectAndRead(t *testing.T, sec opcuasource.Security, url string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts, err := sec.ClientOptions(ctx, 0, url)
	if err != nil {
		return err
	}
	c, err := opcua.NewClient(url, append(opts, opcua.AutoReconnect(false))...)
	if err != nil {
		return err
	}
	if err := c.Connect(ctx); err != nil {
		return err
	}
	defer c.Close(context.Background())
	res, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{
		{NodeID: ua.NewNumericNodeID(0, id.Server_ServerStatus_State), AttributeID: ua.AttributeIDValue}}})
	if err != nil {
		return err
	}
	if len(res.Results) != 1 || res.Results[0].Status != ua.StatusOK {
		t.Fatalf("read server state: %+v", res.Results)
	}
	return nil
}

// TestSecurityInterop connects to a server we did not write with every
// policy and mode the relay supports, anonymous and with a user name.
func TestSecurityInterop(t *testing.T) {
	srv := secureServer(t, nodeopcua.Config{})
	cert, key := clientCert(t)
	for _, tc := range []struct{ policy, mode, user string }{
		{"", "", ""},
		{"None", "None", "relay"},
		{"Basic256Sha256", "Sign", ""},
		{"Basic256Sha256", "SignAndEncrypt", "relay"},
		{"Aes128_Sha256_RsaOaep", "Sign", ""},
		{"Aes128_Sha256_RsaOaep", "SignAndEncrypt", "relay"},
		{"Aes256_Sha256_RsaPss", "Sign", ""},
		{"Aes256_Sha256_RsaPss", "SignAndEncrypt", "relay"},
		{"auto", "", "relay"},
		{"Basic256Sha256", "SignAndEncrypt", "x509"},
	} {
		t.Run(tc.policy+"/"+tc.mode+"/"+tc.user, func(t *testing.T) {
			sec := opcuasource.Security{Policy: tc.policy, Mode: tc.mode}
			if tc.policy != "" && tc.policy != "None" {
				sec.CertFile, sec.KeyFile = cert, key
			}
			switch tc.user {
			case "":
			case "x509": // an X.509 user certificate instead of a user name
				sec.UserCertFile, sec.UserKeyFile = clientCert(t)
			default:
				sec.Username, sec.Password = tc.user, "s3cret #1"
			}
			if err := sec.Validate("security", 1); err != nil {
				t.Fatal(err)
			}
			if err := connectAndRead(t, sec, srv.Endpoint); err != nil {
				t.Fatalf("connect: %v\nserver stderr: %s", err, srv.Stderr())
			}
		})
	}
}

// TestSecurityRefusals: what must not connect does not, with an error
// that says why.
func TestSecurityRefusals(t *testing.T) {
	srv := secureServer(t, nodeopcua.Config{})
	cert, key := clientCert(t)
	otherCert, _ := clientCert(t) // a certificate that is not the server's
	secure := opcuasource.Security{Policy: "Basic256Sha256", Mode: "SignAndEncrypt", CertFile: cert, KeyFile: key}

	t.Run("wrong password", func(t *testing.T) {
		sec := secure
		sec.Username, sec.Password = "relay", "wrong"
		err := connectAndRead(t, sec, srv.Endpoint)
		if err == nil || !strings.Contains(err.Error(), "BadUserAccessDenied") {
			t.Fatalf("got %v, want BadUserAccessDenied", err)
		}
	})
	t.Run("pinned certificate matches", func(t *testing.T) {
		sec := secure
		sec.ServerCerts = []string{srv.CertFile}
		if err := connectAndRead(t, sec, srv.Endpoint); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("pinned certificate differs", func(t *testing.T) {
		sec := secure
		sec.ServerCerts = []string{otherCert}
		err := connectAndRead(t, sec, srv.Endpoint)
		if err == nil || !strings.Contains(err.Error(), "is not the pinned one") {
			t.Fatalf("got %v, want a pinning error", err)
		}
	})
	t.Run("trust directory", func(t *testing.T) {
		sec := secure
		sec.TrustDir = filepath.Dir(otherCert) // holds only other certificates
		err := connectAndRead(t, sec, srv.Endpoint)
		if err == nil || !strings.Contains(err.Error(), "is not in trustDir") {
			t.Fatalf("got %v, want a trust error", err)
		}
		sec.TrustDir = filepath.Dir(srv.CertFile)
		if err := connectAndRead(t, sec, srv.Endpoint); err != nil {
			t.Fatalf("with the server's certificate in trustDir: %v", err)
		}
	})
	t.Run("policy not offered", func(t *testing.T) {
		only := nodeopcua.StartT(t, nodeopcua.Config{Policies: []string{"None"}, Modes: []string{"None"}})
		err := connectAndRead(t, secure, only.Endpoint)
		if err == nil || !strings.Contains(err.Error(), "offers no endpoint with policy Basic256Sha256 and mode SignAndEncrypt (it offers None/None)") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("untrusted client certificate", func(t *testing.T) {
		strict := secureServer(t, nodeopcua.Config{RejectClients: true})
		if err := connectAndRead(t, secure, strict.Endpoint); err == nil {
			t.Fatal("a server that does not trust the client's certificate let it connect")
		}
	})
}

// counterNode returns the node ID of the interop server's counter, whose
// namespace index the server chooses.
func counterNode(t *testing.T, srv *nodeopcua.Server) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := srv.NamespaceIndex(ctx, "urn:apbridge:interop")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("ns=%d;s=Counter", n)
}

// TestWarmPairInterop relays a Warm pair of servers we did not write over
// a signed and encrypted channel with a user-name login, and fails over
// when the primary stops gracefully: the counter keeps coming, Good, from
// the backup, and never goes back in source time. The two servers number
// the counter's namespace differently; the tag names it by URI.
func TestWarmPairInterop(t *testing.T) {
	a := secureServer(t, nodeopcua.Config{ServiceLevel: 250, Namespaces: []string{"urn:apbridge:interop"}})
	b := secureServer(t, nodeopcua.Config{ServiceLevel: 90, Namespaces: []string{"urn:other", "urn:apbridge:interop"}})
	if na, nb := counterNode(t, a), counterNode(t, b); na == nb {
		t.Fatalf("both servers number the counter's namespace alike (%s): the test needs them to differ", na)
	}
	node := "nsu=urn:apbridge:interop;s=Counter"
	cert, key := clientCert(t)
	sec := opcuasource.Security{Policy: "Basic256Sha256", Mode: "SignAndEncrypt", CertFile: cert, KeyFile: key,
		Username: "relay", Password: "s3cret #1"}
	secOpts, err := sec.PairOptions(testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	src, err := opcuasource.New("plant", uaclient.PairConfig{Endpoints: []string{a.Endpoint, b.Endpoint}},
		opcuasource.WithLogger(testutil.Logger(t)), opcuasource.WithPairOptions(secOpts...))
	if err != nil {
		t.Fatal(err)
	}
	br, rec := relayOn(t, src, []bridge.TagConfig{{Name: "Counter", Address: node}})
	goodFrom := func(endpoint string, n int) func() bool {
		return func() bool {
			if br.Stats()[0].Health.Endpoint != endpoint {
				return false
			}
			good := 0
			for _, u := range rec.of("Counter") {
				if u.Status.Quality() == wire.QualityGood {
					good++
				}
			}
			return good >= n
		}
	}
	testutil.WaitFor(t, "Good counter values from the primary", 20*time.Second, goodFrom(a.Endpoint, 5))
	before := len(rec.of("Counter"))
	// The graceful stop: the backup is promoted, the primary says 0 and
	// leaves.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.SetLevel(ctx, 250); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "Good counter values from the backup", 20*time.Second, goodFrom(b.Endpoint, before+5))
	got := rec.of("Counter")
	// The departing primary's data turned Bad_OutOfService with its level
	// 0; a planned failover shows consumers none of it.
	for _, u := range got {
		if u.Status == wire.StatusCode(ua.StatusBadOutOfService) {
			t.Errorf("a Bad_OutOfService sample reached consumers across the graceful failover: %+v", u)
		}
	}
	// Two servers count independently, so the counter's value may jump at
	// the switch; its source time must not go back within a server.
	for i := 1; i < len(got); i++ {
		if got[i].SourceTime.Before(got[i-1].SourceTime) && got[i].Status.Quality() == got[i-1].Status.Quality() {
			t.Errorf("update %d (%v at %v) is older than the one before (%v at %v)", i, got[i].Value, got[i].SourceTime,
				got[i-1].Value, got[i-1].SourceTime)
		}
	}
}

// TestMonitoringInterop sets data-change filters per tag on one server we
// did not write: an absolute deadband thins a counter's updates, and a
// deadband on a string is refused by the server with an error that names
// the tag.
func TestMonitoringInterop(t *testing.T) {
	srv := nodeopcua.StartT(t, nodeopcua.Config{CounterMs: 50})
	deadband := &uaclient.DataChangeFilter{DeadbandType: "absolute", DeadbandValue: 4.5}
	queue := 1
	src, err := opcuasource.New("mon", uaclient.PairConfig{Endpoints: []string{srv.Endpoint}},
		opcuasource.WithMonitoring(map[string]opcuasource.Monitoring{
			"Thinned": {Filter: deadband, QueueSize: &queue},
			"Name":    {Filter: deadband},
		}))
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	const ns = "nsu=urn:apbridge:interop;"
	br, rec := relayOn(t, src, []bridge.TagConfig{
		{Name: "Every", Address: ns + "s=Counter"},
		{Name: "Thinned", Address: ns + "s=Counter"},
		{Name: "Name", Address: ns + "s=Name"},
	}, bridge.WithLogger(zerolog.New(&logs)))
	count := func(tag string) int { return len(rec.of(tag)) }
	testutil.WaitFor(t, "four thinned counter updates", 20*time.Second, func() bool { return count("Thinned") >= 4 })
	testutil.WaitFor(t, "the refusal logged", 10*time.Second, func() bool { return strings.Contains(logs.String(), `"tag":"Name"`) })
	got := map[string][]wire.Update{"Every": rec.of("Every"), "Thinned": rec.of("Thinned"), "Name": rec.of("Name")}
	steps := func(us []wire.Update) (smallest float64) {
		smallest = 1e9
		for i := 2; i < len(us); i++ { // the first is the initial value
			smallest = min(smallest, toFloat(us[i].Value)-toFloat(us[i-1].Value))
		}
		return smallest
	}
	// The positive control: without the filter the same node moves in
	// steps below the deadband.
	if s := steps(got["Every"]); s >= 4.5 {
		t.Errorf("the unfiltered counter's smallest step is %v: the control cannot show a deadband", s)
	}
	if s := steps(got["Thinned"]); s < 4.5 {
		t.Errorf("the filtered counter moved by %v, less than the deadband 4.5: %v", s, got["Thinned"])
	}
	if len(got["Name"]) != 0 {
		t.Errorf("the string tag with a deadband was relayed: %v", got["Name"])
	}
	if st := br.Stats()[0]; st.Failed != 1 {
		t.Errorf("%d tags failed, want the string one", st.Failed)
	}
	t.Logf("refusal: %s", lineWith(logs.String(), `"tag":"Name"`))
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

func toFloat(v any) float64 {
	f, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
	return f
}

// TestBrowseInterop browses a server we did not write, with include and
// exclude patterns and a cap.
func TestBrowseInterop(t *testing.T) {
	srv := nodeopcua.StartT(t, nodeopcua.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := func(tags []bridge.TagConfig) []string {
		var out []string
		for _, tg := range tags {
			out = append(out, tg.Name+"="+tg.Address)
		}
		slices.Sort(out)
		return out
	}
	const ns = "nsu=urn:apbridge:interop;"
	for _, tc := range []struct {
		name string
		root opcuasource.BrowseRoot
		want []string
		warn string
		err  string
	}{
		{"include", opcuasource.BrowseRoot{Node: "i=85", MaxDepth: 2, Include: []string{"Interop.*"}},
			[]string{"Interop.Counter=" + ns + "s=Counter", "Interop.Name=" + ns + "s=Name", "Interop.Setpoint=" + ns + "s=Setpoint"}, "", ""},
		{"include and exclude", opcuasource.BrowseRoot{Node: "i=85", MaxDepth: 2, Include: []string{"Interop.*"}, Exclude: []string{"Interop.[NS]*"}},
			[]string{"Interop.Counter=" + ns + "s=Counter"}, "", ""},
		{"prefix", opcuasource.BrowseRoot{Node: "i=85", MaxDepth: 2, Include: []string{"Interop.C*"}, Prefix: "plc1"},
			[]string{"plc1.Interop.Counter=" + ns + "s=Counter"}, "", ""},
		{"matches nothing", opcuasource.BrowseRoot{Node: "i=85", MaxDepth: 2, Include: []string{"Line9.*"}},
			nil, "none of the", ""},
		{"cap", opcuasource.BrowseRoot{Node: "i=85", MaxDepth: 2, Include: []string{"Interop.*"}, MaxNodes: 2},
			nil, "", "more than maxNodes (2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.root.Validate("browse[0]"); err != nil {
				t.Fatal(err)
			}
			var warned []string
			tags, _, err := opcuasource.BrowseTags(ctx, srv.Endpoint, []opcuasource.BrowseRoot{tc.root},
				func(m string) { warned = append(warned, m) })
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if got := names(tags); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if tc.warn != "" && (len(warned) != 1 || !strings.Contains(warned[0], tc.warn)) {
				t.Errorf("warnings %q, want one with %q", warned, tc.warn)
			}
			if tc.warn == "" && len(warned) > 0 {
				t.Errorf("unexpected warnings %q", warned)
			}
		})
	}
}

// TestPairFaultsInterop: a process kill and a frozen link on the primary
// of a node-opcua pair (250/240) move the data to the backup.
func TestPairFaultsInterop(t *testing.T) {
	for _, fault := range []string{"kill", "freeze"} {
		t.Run(fault, func(t *testing.T) {
			a := nodeopcua.StartT(t, nodeopcua.Config{ServiceLevel: 250})
			b := nodeopcua.StartT(t, nodeopcua.Config{ServiceLevel: 240})
			proxy, err := faultproxy.New(strings.TrimPrefix(a.Endpoint, "opc.tcp://"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { proxy.Close() })
			var mu sync.Mutex
			good := map[servicelevel.Endpoint]int{}
			failovers := 0
			p, err := uaclient.NewPair(uaclient.PairConfig{Endpoints: []string{"opc.tcp://" + proxy.Addr(), b.Endpoint}},
				uaclient.WithLogger(testutil.Logger(t)),
				uaclient.WithDataHandler(func(u uaclient.Update) {
					if u.Value != nil && u.Value.Status == ua.StatusOK {
						mu.Lock()
						good[u.Endpoint]++
						mu.Unlock()
					}
				}),
				uaclient.WithEventHandler(func(e uaclient.Event) {
					if e.Kind == uaclient.EventFailover {
						mu.Lock()
						failovers++
						mu.Unlock()
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			startOnCounter(t, p)
			count := func(e servicelevel.Endpoint) int {
				mu.Lock()
				defer mu.Unlock()
				return good[e]
			}
			testutil.WaitFor(t, "data from the primary", 10*time.Second, func() bool { return count(servicelevel.Primary) >= 3 })
			if count(servicelevel.Backup) != 0 {
				t.Fatal("data from the backup before the fault")
			}
			switch fault {
			case "kill":
				a.Kill()
			case "freeze":
				proxy.Freeze()
			}
			testutil.WaitFor(t, "data from the backup", 15*time.Second, func() bool { return count(servicelevel.Backup) >= 3 })
			mu.Lock()
			n := failovers
			mu.Unlock()
			if n != 1 {
				t.Fatalf("%d failovers, want 1", n)
			}
			// A reconnect of the frozen primary is stuck in the OPC UA
			// handshake now; Close must end it, not wait out the 10 s
			// connect timeout.
			start := time.Now()
			p.Close()
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("Close took %v after a frozen link", d)
			}
		})
	}
}

// received collects what a NATS subscriber receives, by tag.
type received struct {
	mu    sync.Mutex
	byTag map[string][]wire.Update
}

func (r *received) of(tag string) []wire.Update {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.byTag[tag])
}

// relayOn relays src's tags through a bridge on a one-node cluster, to a
// subscriber whose updates it returns; everything stops with the test.
func relayOn(t *testing.T, src bridge.Source, tags []bridge.TagConfig, opts ...bridge.Option) (*bridge.Bridge, *received) {
	t.Helper()
	cl, conn := testutil.ClusterConn(t, natstest.WithNodes(1))
	nc, err := nats.Connect(cl.Node(0).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rec := &received{byTag: map[string][]wire.Update{}}
	if _, err := nc.Subscribe("apbridge."+src.Name()+".>", func(m *nats.Msg) {
		if u, err := wire.DecodeJSON(m.Data); err == nil {
			rec.mu.Lock()
			rec.byTag[u.Tag] = append(rec.byTag[u.Tag], u)
			rec.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	br, err := bridge.New(conn, bridge.Config{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := br.AddSource(src, tags); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := br.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Close() })
	return br, rec
}

// TestPairBlipInterop: a connection reset under node-opcua's primary (the
// server stays up) keeps the session: it is activated on a new connection,
// what was sent into the broken one is asked for again, and the counter
// goes on without a lost or repeated tick, and without a switch. Control:
// ticks are counted (the counter moved across the blip), and the recovery
// was reported.
func TestPairBlipInterop(t *testing.T) {
	for _, standby := range []int{240, 90} {
		t.Run(fmt.Sprintf("standby %d", standby), func(t *testing.T) { pairBlipInterop(t, standby) })
	}
}

// pairBlipInterop resets the link of a 250 primary whose standby reports
// standby: 90 is a Warm pair, whose reconnect must not wait for the
// reconnect delay either.
func pairBlipInterop(t *testing.T, standby int) {
	a := nodeopcua.StartT(t, nodeopcua.Config{ServiceLevel: 250, CounterMs: 100})
	b := nodeopcua.StartT(t, nodeopcua.Config{ServiceLevel: standby})
	proxy, err := faultproxy.New(strings.TrimPrefix(a.Endpoint, "opc.tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	var mu sync.Mutex
	var values []int32
	var recovered, slow []uaclient.Event
	failovers := 0
	p, err := uaclient.NewPair(uaclient.PairConfig{Endpoints: []string{"opc.tcp://" + proxy.Addr(), b.Endpoint},
		QueueSize: new(10), SamplingIntervalMilliseconds: new(25)},
		uaclient.WithLogger(testutil.Logger(t)),
		uaclient.WithDataHandler(func(u uaclient.Update) {
			if u.Kind != uaclient.UpdateData || u.Value == nil || u.Value.Value == nil || u.Endpoint != servicelevel.Primary {
				return
			}
			if v, ok := u.Value.Value.Value().(int32); ok {
				mu.Lock()
				values = append(values, v)
				mu.Unlock()
			}
		}),
		uaclient.WithEventHandler(func(e uaclient.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case uaclient.EventFailover:
				failovers++
			case uaclient.EventLinkRecovered:
				recovered = append(recovered, e)
			case uaclient.EventRetryScheduled:
				if !e.Fast {
					slow = append(slow, e)
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	startOnCounter(t, p)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(values)
	}
	testutil.WaitFor(t, "data from the primary", 10*time.Second, func() bool { return count() >= 5 })
	proxy.ResetAll()
	testutil.WaitFor(t, "the recovery", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(recovered) > 0
	})
	before := count()
	testutil.WaitFor(t, "data after the blip", 10*time.Second, func() bool { return count() >= before+5 })
	mu.Lock()
	defer mu.Unlock()
	if failovers != 0 {
		t.Fatalf("%d failovers on a blip", failovers)
	}
	if len(slow) != 0 {
		t.Fatalf("a blip retried on the slow timing: %s", slow[0].Message)
	}
	for i := 1; i < len(values); i++ {
		if values[i] != values[i-1]+1 {
			t.Fatalf("the counter went from %d to %d (values %v); recovery: %s", values[i-1], values[i], values, recovered[0].Message)
		}
	}
	t.Logf("%d ticks in order; %s; link as node-opcua granted it: %+v", len(values), recovered[0].Message, p.Status().Link)
}

// startOnCounter adds the interop server's counter to p, as handle 1, and
// starts p.
func startOnCounter(t *testing.T, p *uaclient.Pair) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.AddItems(ctx, []uaclient.Item{{Handle: 1, NodeID: "nsu=urn:apbridge:interop;s=Counter"}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}
