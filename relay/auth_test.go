package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/rs/zerolog"
)

// TestRefusedCredentials: a broker refusing the credentials is logged as
// such at error level on each attempt; with failOnAuthError the start
// fails at once with ErrAuthorization. The right password starts.
func TestRefusedCredentials(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(1), natstest.WithUser("relay", "right"))
	cfg := func(password string, fail bool) *relay.Config {
		c, err := relay.Parse(fmt.Appendf(nil, "nats: {servers: [%s], user: relay, password: %s, failOnAuthError: %v}\nhttp: {listen: ''}\nsources:\n  - {name: sim, endpoints: ['opc.tcp://127.0.0.1:4840'], tags: [{name: A, address: 'i=1'}]}\n",
			cl.URLs()[0], password, fail))
		if err != nil {
			t.Fatal(err)
		}
		c.Sources = nil // a simulated source instead, below
		return c
	}
	src := func() relay.Option {
		return relay.WithSource(simsource.New("sim"), []bridge.TagConfig{{Name: "A", Address: "ns=1;s=A"}})
	}

	var logs testutil.SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	_, err := relay.Start(ctx, cfg("wrong", false), relay.WithLogger(zerolog.New(&logs)), src())
	cancel()
	if err == nil {
		t.Fatal("started with a wrong password")
	}
	if n := logs.Count(`"level":"error","component":"apconn"`); n < 2 || logs.Count("NATS refused the credentials") != n {
		t.Errorf("%d error lines for the refusals, want one per attempt (2 or more):\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "wrong") {
		t.Errorf("the password is in the log:\n%s", logs.String())
	}

	// Without the option the start ends with its context; with it, at the
	// first refusal, with ErrAuthorization.
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = relay.Start(ctx, cfg("wrong", true), src())
	if !errors.Is(err, apconn.ErrAuthorization) {
		t.Fatalf("failOnAuthError: %v, want ErrAuthorization", err)
	}

	// Positive control: the right password starts.
	r, err := relay.Start(ctx, cfg("right", true), src())
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// TestUnreachableNATSLogged: each failed attempt to reach NATS at start
// is logged at warn level with its reason.
func TestUnreachableNATSLogged(t *testing.T) {
	// A port nothing listens on: one that was just free.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.Addr().String()
	l.Close()
	c, err := relay.Parse(fmt.Appendf(nil, "nats: {servers: ['nats://%s']}\nhttp: {listen: ''}\nsources:\n  - {name: sim, endpoints: ['opc.tcp://127.0.0.1:4840'], tags: [{name: A, address: 'i=1'}]}\n", ln))
	if err != nil {
		t.Fatal(err)
	}
	c.Sources = nil
	var logs testutil.SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err = relay.Start(ctx, c, relay.WithLogger(zerolog.New(&logs)),
		relay.WithSource(simsource.New("sim"), []bridge.TagConfig{{Name: "A", Address: "ns=1;s=A"}}))
	if err == nil {
		t.Fatal("started without a broker")
	}
	if n := logs.Count(`"level":"warn","component":"apconn"`); n < 2 || logs.Count("NATS connect failed; retrying") != n || !strings.Contains(logs.String(), "no servers available for connection (last dial: dial tcp "+ln+": connect: connection refused)") {
		t.Errorf("%d warn lines, want one per attempt with the reason:\n%s", n, logs.String())
	}
}
