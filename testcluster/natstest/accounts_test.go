package natstest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// accountsConf has a service account and two importers, one that shares
// its users' details and one that does not. mallory is a second user of
// the service's own account.
const accountsConf = `
accounts {
  SVC: {
    users: [{user: svc, password: s}, {user: mallory, password: m}]
    exports: [{service: "svc.>"}]
  }
  PLANT: {
    users: [{user: alice, password: a}]
    imports: [{service: {account: SVC, subject: "svc.>"}, share: true}]
  }
  OTHER: {
    users: [{user: bob, password: b}]
    imports: [{service: {account: SVC, subject: "svc.>"}}]
  }
}
`

// TestAccountsRequestInfo pins down what the relay's write audit relies
// on: through a service import the server writes Nats-Request-Info itself,
// over whatever the client put there (with the user only when the import
// shares it), while a request inside one account carries the client's own
// header unchanged. The request crosses the cluster's routes.
func TestAccountsRequestInfo(t *testing.T) {
	c := startCluster(t, WithAccounts(accountsConf, "svc", "s"))
	svc := connect(t, c, c.Node(0).URL())
	if _, err := svc.Subscribe("svc.>", func(m *nats.Msg) {
		m.Respond([]byte(m.Header.Get("Nats-Request-Info")))
	}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}
	forged := `{"acc":"PLANT","user":"admin"}`
	ask := func(user, password string) (acc, who string) {
		t.Helper()
		nc := connect(t, c, c.Node(2).URL(), nats.UserInfo(user, password))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var rep *nats.Msg
		for rep == nil {
			m := nats.NewMsg("svc.write")
			m.Header.Set("Nats-Request-Info", forged)
			r, err := nc.RequestMsgWithContext(ctx, m)
			switch {
			case err == nil:
				rep = r
			case ctx.Err() != nil:
				t.Fatalf("%s: no reply: %v", user, err)
			case !strings.Contains(err.Error(), "no responders"):
				t.Fatalf("%s: %v", user, err)
			}
			// No responders: the subscription has not crossed the routes
			// yet; ask again shortly.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		var ci struct {
			Acc  string `json:"acc"`
			User string `json:"user"`
		}
		if err := json.Unmarshal(rep.Data, &ci); err != nil {
			t.Fatalf("%s: header %q: %v", user, rep.Data, err)
		}
		return ci.Acc, ci.User
	}
	if acc, who := ask("alice", "a"); acc != "PLANT" || who != "alice" {
		t.Errorf("through a sharing import: acc %q user %q, want the server's PLANT/alice", acc, who)
	}
	if acc, who := ask("bob", "b"); acc != "OTHER" || who != "" {
		t.Errorf("through an import that does not share: acc %q user %q, want the server's OTHER and no user", acc, who)
	}
	if acc, who := ask("mallory", "m"); acc != "PLANT" || who != "admin" {
		t.Errorf("inside the account: acc %q user %q, want the client's own forgery PLANT/admin", acc, who)
	}
}

// TestWithAccountsRejectsBadConf: a conf the server refuses, no probe
// user, or WithUser beside it fails Start before it starts anything.
func TestWithAccountsRejectsBadConf(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, opts := range [][]Option{
		{WithAccounts(`accounts { A: { users: [ {user: a, password: x} ] }`, "a", "x")},
		{WithAccounts(accountsConf, "", "")},
		{WithUser("u", "p"), WithAccounts(accountsConf, "svc", "s")},
		{WithAccounts(accountsConf, "svc", "s"), WithUser("u", "p")},
	} {
		c, err := Start(ctx, opts...)
		if c != nil {
			c.Close()
		}
		if err == nil || !strings.HasPrefix(err.Error(), "natstest: With") {
			t.Errorf("Start: %v, want an error of the option", err)
		}
	}
}
