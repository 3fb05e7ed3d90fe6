package bridge_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// auditAccounts is an account layout that does not follow
// docs/security.md: mallory is a user of the relay's account who may
// publish on the write subjects. The plant's account imports them from the
// relay's account, sharing its users' names, for two relays: one that
// trusts the header (prefix apbridge) and one that does not (audit).
const auditAccounts = `
accounts {
  RELAY: {
    users: [
      {user: relay, password: r, permissions: {publish: {deny: ["apbridge.write.>", "audit.write.>"]}}}
      {user: mallory, password: m}
    ]
    exports: [{service: "apbridge.write.>"}, {service: "audit.write.>"}]
  }
  PLANT: {
    users: [{user: alice, password: a}]
    imports: [
      {service: {account: RELAY, subject: "apbridge.write.>"}, share: true}
      {service: {account: RELAY, subject: "audit.write.>"}, share: true}
    ]
  }
}
`

// auditBridge is a bridge of one writable tag, SP1 of source line1, on cl,
// logging into logs.
func auditBridge(t *testing.T, cl *natstest.Cluster, cfg bridge.Config, logs *testutil.SyncBuffer) (*bridge.Bridge, *simsource.Source) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := apconn.Connect(ctx, cl.URLs(), apconn.WithNATSOptions(cl.ClientOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	src := simsource.New("line1")
	b, err := bridge.New(conn, cfg, bridge.WithLogger(zerolog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddSource(src, []bridge.TagConfig{{Name: "SP1", Address: "ns=1;s=SP1", Writable: true}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, src
}

// writeAs sends a write request as user, with the Nats-Request-Info header
// info unless it is "", and fails the test unless it succeeds.
func writeAs(t *testing.T, cl *natstest.Cluster, user, password, subject, info string) {
	t.Helper()
	nc, err := nats.Connect(cl.Node(len(cl.Nodes())-1).URL(), nats.UserInfo(user, password))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m := nats.NewMsg(subject)
	m.Data = []byte(`{"value": 7, "type": "Int64"}`)
	if info != "" {
		m.Header.Set("Nats-Request-Info", info)
	}
	var rep *nats.Msg
	testutil.WaitFor(t, user+"'s write to be answered", 10*time.Second, func() bool {
		// No responders until the service's interest has crossed the
		// routes and the import.
		rep, err = nc.RequestMsg(m, 2*time.Second)
		return !errors.Is(err, nats.ErrNoResponders)
	})
	if err != nil || rep.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("%s's write: %v %v %s", user, err, rep.Header, rep.Data)
	}
}

// refused connects as user and fails the test unless the server refuses
// the publish or subscribe of do as a permissions violation.
func refused(t *testing.T, cl *natstest.Cluster, user, password, what string, do func(*nats.Conn) error) {
	t.Helper()
	denied := make(chan error, 1)
	nc, err := nats.Connect(cl.Node(0).URL(), nats.UserInfo(user, password), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case denied <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := do(nc); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-denied:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("%s %s: %v, want a permissions violation", user, what, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s may %s", user, what)
	}
}

// guideAccounts returns the account layout of docs/security.md as the
// guide prints it.
func guideAccounts(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "### Making the write service trustworthy")
	if ok {
		_, rest, ok = strings.Cut(rest, "```\naccounts {")
	}
	conf, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("docs/security.md: no accounts block under Making the write service trustworthy")
	}
	return "accounts {" + conf
}

// TestSecurityGuideLayout runs docs/security.md's account layout as
// printed: a write of a PLANT user crosses the import, and the server's
// account and user replace the header the client forged; the relay's own
// user may not send a write, a user without write permission may not
// either, and nobody in PLANT may listen on the write subjects.
func TestSecurityGuideLayout(t *testing.T) {
	t.Setenv("APBRIDGE_NATS_PASSWORD", "r")
	t.Setenv("ALICE_PASSWORD", "a")
	t.Setenv("VIEWER_PASSWORD", "v")
	cl := testutil.StartCluster(t, natstest.WithNodes(2), natstest.WithAccounts(guideAccounts(t), "apbridge", "r"))
	var logs testutil.SyncBuffer
	b, src := auditBridge(t, cl, bridge.Config{TrustRequestInfo: true}, &logs)
	ws, _ := b.WriteSubject("line1", "SP1")
	writeAs(t, cl, "alice", "a", ws, `{"acc":"PLANT","user":"admin"}`)
	if out := logs.String(); !strings.Contains(out, `"tag":"SP1","user":"PLANT/alice","identity":"server","status":"0x00000000","message":"write-back"`) ||
		strings.Contains(out, "admin") {
		t.Errorf("through the import: want the server's PLANT/alice and no trace of the forgery:\n%s", out)
	}
	refused(t, cl, "apbridge", "r", "publish a write", func(nc *nats.Conn) error { return nc.Publish(ws, []byte(`1`)) })
	refused(t, cl, "viewer", "v", "publish a write", func(nc *nats.Conn) error { return nc.Publish(ws, []byte(`1`)) })
	refused(t, cl, "alice", "a", "listen on the write subjects", func(nc *nats.Conn) error {
		_, err := nc.Subscribe("apbridge.write.>", func(*nats.Msg) {})
		return err
	})
	if n := len(src.Writes()); n != 1 {
		t.Fatalf("%d writes reached the source, want alice's 1", n)
	}
}

// TestWriteAuditIdentity: the write log names as user only whom the NATS
// server vouched for. A relay that does not trust the header logs any
// header as claimed_user, identity unverified, so a forged PLANT/admin
// never appears as the user. A relay that trusts it, on a deployment where
// a user of its account can still publish a write, warns at a write with
// no header.
func TestWriteAuditIdentity(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(2), natstest.WithAccounts(auditAccounts, "relay", "r"))
	forged := `{"acc":"PLANT","user":"admin"}`

	var plainLog testutil.SyncBuffer
	pb, psrc := auditBridge(t, cl, bridge.Config{Prefix: "audit"}, &plainLog)
	ps, _ := pb.WriteSubject("line1", "SP1")
	writeAs(t, cl, "mallory", "m", ps, forged)
	out := plainLog.String()
	if !strings.Contains(out, `"tag":"SP1","user":"unknown","claimed_user":"PLANT/admin","identity":"unverified","status":"0x00000000","message":"write-back"`) ||
		strings.Contains(out, `"user":"PLANT/admin"`) {
		t.Errorf("a forged header is logged as a user:\n%s", out)
	}
	// Even the server's header is a claim to a relay that was not told
	// the subjects are import-only: it cannot tell the two apart.
	writeAs(t, cl, "alice", "a", ps, "")
	if out := plainLog.String(); !strings.Contains(out, `"user":"unknown","claimed_user":"PLANT/alice","identity":"unverified"`) {
		t.Errorf("the import's header to a relay that does not trust it:\n%s", out)
	}
	if n := len(psrc.Writes()); n != 2 {
		t.Fatalf("%d writes reached the source, want 2", n)
	}

	var trustedLog testutil.SyncBuffer
	tb, _ := auditBridge(t, cl, bridge.Config{TrustRequestInfo: true}, &trustedLog)
	ws, _ := tb.WriteSubject("line1", "SP1")
	writeAs(t, cl, "mallory", "m", ws, "")
	if out := trustedLog.String(); !strings.Contains(out, `"user":"unknown","identity":"none","status":"0x00000000","message":"write-back"`) ||
		!strings.Contains(out, "write request without Nats-Request-Info although the service trusts it") {
		t.Errorf("a direct write to a trusting relay is not flagged:\n%s", out)
	}
	// Positive control: the relay that does not trust the header does not
	// warn about its absence.
	writeAs(t, cl, "mallory", "m", ps, "")
	if strings.Contains(plainLog.String(), "although the service trusts it") {
		t.Error("a relay that does not trust the header warns about its absence")
	}
}
