package natstest

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/testcluster/internal/ports"
	"github.com/nats-io/nats.go"
)

func TestClusterForwardsEndToEnd(t *testing.T) {
	c := startCluster(t)
	if len(c.Nodes()) != 3 {
		t.Fatalf("nodes = %d", len(c.Nodes()))
	}
	sub := connect(t, c, c.Node(2).URL())
	ch := make(chan *nats.Msg, 1)
	if _, err := sub.ChanSubscribe("x", ch); err != nil {
		t.Fatal(err)
	}
	sub.Flush()
	pub := connect(t, c, c.Node(0).URL())
	// Interest reaches node 1 asynchronously; the cluster is ready, so it
	// arrives quickly, but poll rather than assume.
	deadline := time.Now().Add(5 * time.Second)
	for {
		pub.Publish("x", []byte("hi"))
		select {
		case m := <-ch:
			if string(m.Data) != "hi" {
				t.Fatalf("got %q", m.Data)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no message across the cluster")
		}
	}
}

func TestLameDuckNotifiesAndEvicts(t *testing.T) {
	c := startCluster(t, WithLameDuck(1500*time.Millisecond, 500*time.Millisecond))
	n := c.Node(0)
	ldm := make(chan time.Time, 1)
	disc := make(chan time.Time, 1)
	connect(t, c, n.URL(),
		nats.LameDuckModeHandler(func(*nats.Conn) { ldm <- time.Now() }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case disc <- time.Now():
			default:
			}
		}),
		nats.ReconnectWait(50*time.Millisecond),
	)
	start := time.Now()
	done := n.EnterLameDuck()
	if time.Since(start) > 50*time.Millisecond {
		t.Fatal("EnterLameDuck blocked the caller")
	}
	var tl, td time.Time
	select {
	case tl = <-ldm:
	case <-time.After(5 * time.Second):
		t.Fatal("no LDM notice")
	}
	select {
	case td = <-disc:
	case <-time.After(5 * time.Second):
		t.Fatal("not evicted")
	}
	if ev := td.Sub(start); ev < 400*time.Millisecond {
		t.Fatalf("evicted after %v, before the grace period", ev)
	}
	if tl.Sub(start) > 400*time.Millisecond {
		t.Fatalf("LDM notice took %v", tl.Sub(start))
	}
	<-done
	if n.Running() {
		t.Fatal("node still running after LDM")
	}
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !n.Running() {
		t.Fatal("restart did not bring the node up")
	}
}

func TestLDMClientByID(t *testing.T) {
	c := startCluster(t)
	n := c.Node(1)
	ldm := make(chan struct{}, 1)
	connect(t, c, n.URL(), nats.Name("target"), nats.LameDuckModeHandler(func(*nats.Conn) { ldm <- struct{}{} }))
	other := make(chan struct{}, 1)
	connect(t, c, n.URL(), nats.Name("bystander"), nats.LameDuckModeHandler(func(*nats.Conn) { other <- struct{}{} }))
	ids := n.ClientIDs("target")
	if len(ids) != 1 {
		t.Fatalf("client ids = %v", ids)
	}
	if err := n.LDMClientByID(ids[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ldm:
	case <-time.After(5 * time.Second):
		t.Fatal("no LDM notice for the targeted client")
	}
	select {
	case <-other:
		t.Fatal("a client that was not targeted got the notice")
	case <-time.After(100 * time.Millisecond):
	}
	if !n.Running() {
		t.Fatal("LDMClientByID took the node down")
	}
}

func TestKillAndRestartOnOldPorts(t *testing.T) {
	c := startCluster(t)
	n := c.Node(0)
	url, oldID := n.URL(), n.ServerID()
	disc := make(chan struct{}, 1)
	ldm := make(chan struct{}, 1)
	connect(t, c, url, nats.NoReconnect(),
		nats.LameDuckModeHandler(func(*nats.Conn) { ldm <- struct{}{} }),
		nats.ClosedHandler(func(*nats.Conn) { disc <- struct{}{} }))
	n.Kill()
	select {
	case <-disc:
	case <-time.After(5 * time.Second):
		t.Fatal("client not disconnected by kill")
	}
	select {
	case <-ldm:
		t.Fatal("kill sent an LDM notice")
	default:
	}
	if n.Running() {
		t.Fatal("node running after kill")
	}
	if err := n.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n.URL() != url {
		t.Fatalf("restart moved the node: %s -> %s", url, n.URL())
	}
	if n.ServerID() == oldID {
		t.Fatal("restarted node kept its server ID")
	}
	connect(t, c, url)
}

func TestTLSAndProxyRTT(t *testing.T) {
	c := startCluster(t, WithTLS(), WithClientRTT(40*time.Millisecond))
	if c.CA() == nil || c.CA().File() == "" {
		t.Fatal("no CA")
	}
	nc := connect(t, c, c.Node(0).URL())
	if !nc.TLSRequired() {
		t.Fatal("TLS not in use")
	}
	rtt, err := nc.RTT()
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 40*time.Millisecond {
		t.Fatalf("RTT through the proxy = %v, want >= 40ms", rtt)
	}
	// Discovered servers go through the proxies too.
	for _, u := range nc.DiscoveredServers() {
		if c.NodeByURL(u) == nil || hostPort(u) == hostPort(c.NodeByURL(u).DirectURL()) {
			t.Fatalf("discovered URL %s bypasses the proxies", u)
		}
	}
	// Without a CA the handshake fails: TLS is really on.
	if _, err := nats.Connect(c.Node(0).URL(), nats.NoReconnect(), nats.Timeout(time.Second)); err == nil {
		t.Fatal("connected without trusting the CA")
	}
}

func TestJetStreamReady(t *testing.T) {
	c := startCluster(t, WithJetStream())
	nc := connect(t, c, c.Node(0).URL())
	m, err := nc.Request("$JS.API.INFO", nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Data) == 0 {
		t.Fatal("empty JetStream info")
	}
}

// A port freed by a kill must not be handed out as the source port of some
// other outgoing connection, or the restart cannot bind it (CI saw one held
// for 50 s): stable ports come from below the ephemeral range. The OPC UA
// servers' endpoints have the same test in uaserver.
func TestRestartablePortsAreOutsideTheEphemeralRange(t *testing.T) {
	stableLow, ephemeralLow, ok := ports.StableRange()
	if !ok {
		t.Skip("the ephemeral range leaves no room below it")
	}
	c := startCluster(t, WithNodes(2))
	for _, port := range []int{c.Node(0).clientPort, c.Node(0).clusterPort, c.Node(1).clientPort, c.Node(1).clusterPort} {
		if port < stableLow || port >= ephemeralLow {
			t.Errorf("port %d is outside %d-%d", port, stableLow, ephemeralLow-1)
		}
	}
}

func TestRestartSaysWhichPortIsTaken(t *testing.T) {
	c := startCluster(t, WithNodes(2))
	n := c.Node(0)
	n.Kill()
	squatter, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.clientPort)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = n.Restart(ctx)
	squatter.Close()
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(n.clientPort)) {
		t.Fatalf("restart with its port taken: %v", err)
	}
	if n.Running() {
		t.Fatal("node running on a port someone else holds")
	}
	// Once the port is free again the same node comes back on it.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	connect(t, c, n.URL())
}
