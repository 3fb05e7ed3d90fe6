package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

func configRequest(t *testing.T, nc *nats.Conn, op, body string, hdr nats.Header) relay.ConfigReply {
	t.Helper()
	m := nats.NewMsg("apbridge.config." + op)
	m.Data = []byte(body)
	for k, v := range hdr {
		m.Header[k] = v
	}
	rep, err := nc.RequestMsg(m, 20*time.Second)
	if err != nil {
		t.Fatalf("config %s: %v", op, err)
	}
	var out relay.ConfigReply
	if err := json.Unmarshal(rep.Data, &out); err != nil {
		t.Fatalf("config %s: %v: %s", op, err, rep.Data)
	}
	return out
}

// TestConfigService: the relay's config service shows the running config
// with its secrets redacted, validates and diffs a proposed config without
// applying it, and applies it, each answer with the version; the audit
// line names who asked.
func TestConfigService(t *testing.T) {
	t.Setenv("APB_TEST_PW", "s3cret-from-env")
	t.Setenv("APB_TEST_NAME", "conn-from-env")
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	servers, err := uaserver.StartPair(ctx, uaserver.WithTags(3), uaserver.WithSetpoints(0))
	if err != nil {
		t.Fatal(err)
	}
	defer servers.Close()
	var names []string
	for _, tg := range servers.Tags() {
		names = append(names, tg.Name)
	}
	base := strings.Replace(applyConfig(cl, servers, tagLines(servers, names[0])),
		"nats: {servers: [", "nats: {name: '${APB_TEST_NAME}', user: relay, password: '${APB_TEST_PW}', servers: [", 1)
	cfg, err := relay.Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	r, err := relay.Start(ctx, cfg, relay.WithLogger(zerolog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	nc, err := nats.Connect(cl.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var got relay.ConfigReply
	testutil.WaitFor(t, "the config service", 10*time.Second, func() bool {
		m, err := nc.Request("apbridge.config.get", nil, time.Second)
		return err == nil && json.Unmarshal(m.Data, &got) == nil
	})
	raw, _ := json.Marshal(got)
	if !got.OK || got.Version != 1 || strings.Contains(string(raw), "s3cret") || strings.Contains(string(raw), "conn-from-env") ||
		!strings.Contains(string(raw), `"password":"[redacted]"`) || !strings.Contains(string(raw), `"name":"${APB_TEST_NAME}"`) ||
		!strings.Contains(string(raw), names[0]) {
		t.Fatalf("config get: %s", raw)
	}

	two := strings.Replace(base, tagLines(servers, names[0]), tagLines(servers, names[0], names[1]), 1)
	broken := strings.Replace(two, "mode: warm", "mode: lukewarm", 1)
	broken = strings.Replace(broken, "name: line1", "name: ''", 1)
	if rep := configRequest(t, nc, "validate", broken, nil); rep.OK || len(rep.Errors) < 2 || rep.Version != 1 {
		t.Fatalf("validate of a config with two problems: %+v", rep)
	}
	if rep := configRequest(t, nc, "validate", two, nil); !rep.OK || rep.Plan != nil {
		t.Fatalf("validate of a good config: %+v", rep)
	}
	rep := configRequest(t, nc, "diff", two, nil)
	if !rep.OK || rep.Version != 1 || rep.Plan == nil || rep.Plan.Summary() != "sources +0 -0 ~0, tags +1 -0 ~0" {
		t.Fatalf("diff: %+v", rep)
	}
	if _, ok := r.Bridge().Subject("line1", names[1]); ok {
		t.Fatal("a dry run applied the config")
	}
	restart := strings.Replace(two, "http: {listen: \"\"}", "http: {listen: \"\"}\nnoHeaders: true", 1)
	if rep := configRequest(t, nc, "apply", restart, nil); rep.OK || rep.Version != 1 || !strings.Contains(strings.Join(rep.Errors, ";"), "noHeaders") {
		t.Fatalf("apply of a restart-only change: %+v", rep)
	}
	hdr := nats.Header{"Nats-Request-Info": []string{`{"acc":"OPS","user":"alice"}`}}
	rep = configRequest(t, nc, "apply", two, hdr)
	if !rep.OK || rep.Version != 2 || rep.Plan.Summary() != "sources +0 -0 ~0, tags +1 -0 ~0" {
		t.Fatalf("apply: %+v", rep)
	}
	if _, ok := r.Bridge().Subject("line1", names[1]); !ok {
		t.Fatal("apply did not add the tag")
	}
	// Without trustRequestInfo the header is a claim: logged as such.
	var audit []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"message":"config applied"`) {
			audit = append(audit, l)
		}
	}
	if len(audit) != 1 || !strings.Contains(audit[0], `"via":"service"`) || !strings.Contains(audit[0], `"claimed_user":"OPS/alice"`) ||
		!strings.Contains(audit[0], `"identity":"unverified"`) || !strings.Contains(audit[0], `"version":2`) {
		t.Fatalf("audit lines %q", audit)
	}
	if got := configRequest(t, nc, "get", "", nil); got.Version != 2 {
		t.Fatalf("get after apply: version %d", got.Version)
	}
}
