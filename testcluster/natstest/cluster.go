package natstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/internal/ports"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Cluster is an embedded nats-server cluster on loopback.
type Cluster struct {
	cfg     config
	dir     string
	ownDir  bool
	ca      *CA
	nodes   []*Node
	ports   ports.Blocks // the nodes' ports, theirs until Close
	closeMu sync.Mutex
	closed  bool
}

// Node is one server of a Cluster.
type Node struct {
	c           *Cluster
	index       int
	name        string
	clientPort  int
	clusterPort int
	proxy       *faultproxy.Proxy
	// leafPort and leafProxy are the leaf node port and the proxy in
	// front of it (WithLeafListen), 0 and nil without.
	leafPort  int
	leafProxy *faultproxy.Proxy

	mu      sync.Mutex
	srv     *server.Server
	ldmDone chan struct{}
}

// Start starts an N-node cluster (default 3) on free loopback ports and
// returns once every node forwards to every other node end to end: a
// message published on each node reaches a subscriber on each node. A route
// listed in Routez is not enough; a node can take a second more before it
// forwards (the route readiness trap).
//
// It returns the first error of opts, such as a value out of range, before
// it starts anything.
func Start(ctx context.Context, opts ...Option) (*Cluster, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.ldmDur == 0 {
		cfg.ldmDur = cfg.ldmGrace + time.Second
	}
	if cfg.ldmGrace >= cfg.ldmDur {
		return nil, fmt.Errorf("natstest: lame-duck grace %v must be shorter than the duration %v", cfg.ldmGrace, cfg.ldmDur)
	}
	c := &Cluster{cfg: cfg, dir: cfg.dir}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "apbridge-nats-")
		if err != nil {
			return nil, err
		}
		c.dir, c.ownDir = d, true
	}
	if cfg.tls {
		ca, err := newCA(c.dir)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.ca = ca
	}
	for i := range cfg.nodes {
		n := &Node{c: c, index: i, name: "n" + strconv.Itoa(i+1)}
		if cfg.name != "" {
			n.name = cfg.name + "-" + n.name
		}
		if n.clientPort, err = c.ports.Port(); err != nil {
			c.Close()
			return nil, err
		}
		if n.clusterPort, err = c.ports.Port(); err != nil {
			c.Close()
			return nil, err
		}
		if cfg.proxies {
			p, err := faultproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(n.clientPort)))
			if err != nil {
				c.Close()
				return nil, err
			}
			p.SetDelay(cfg.Delay)
			n.proxy = p
		}
		if cfg.leafListen {
			if n.leafPort, err = c.ports.Port(); err != nil {
				c.Close()
				return nil, err
			}
			p, err := faultproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(n.leafPort)))
			if err != nil {
				c.Close()
				return nil, err
			}
			n.leafProxy = p
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := n.start(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.ReadyWait)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (n *Node) options() (*server.Options, error) {
	cfg := n.c.cfg
	o := &server.Options{
		ServerName:          n.name,
		Host:                "127.0.0.1",
		Port:                n.clientPort,
		NoLog:               true,
		NoSigs:              true,
		LameDuckDuration:    cfg.ldmDur,
		LameDuckGracePeriod: cfg.ldmGrace,
		MaxPayload:          server.MAX_PAYLOAD_SIZE,
		Cluster: server.ClusterOpts{
			Name: "apbridge",
			Host: "127.0.0.1",
			Port: n.clusterPort,
		},
	}
	if cfg.name != "" {
		o.Cluster.Name = cfg.name
	}
	if n.leafPort != 0 {
		o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", n.leafPort
		// Servers that dial in learn the other nodes' leaf URLs from
		// this one: they must be the proxies too, or a reconnect would
		// bypass the WAN the test cuts.
		o.LeafNode.Advertise = n.leafProxy.Addr()
	}
	if len(cfg.leafRemotes) > 0 {
		r := &server.RemoteLeafOpts{}
		for _, s := range cfg.leafRemotes {
			u, err := url.Parse(s)
			if err != nil {
				return nil, fmt.Errorf("natstest: node %s: leaf remote %q: %w", n.name, s, err)
			}
			r.URLs = append(r.URLs, u)
		}
		// A leaf node retries its remote every second by default; a test
		// of a healed WAN wants it back sooner.
		o.LeafNode.ReconnectInterval = 250 * time.Millisecond
		r.Compression.Mode = cfg.leafCompression
		o.LeafNode.Remotes = []*server.RemoteLeafOpts{r}
	}
	if n.proxy != nil {
		o.ClientAdvertise = n.proxy.Addr()
	}
	var routes []string
	for _, other := range n.c.nodes {
		if other != n {
			routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(other.clusterPort))
		}
	}
	if len(routes) > 0 {
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
	}
	if cfg.jetStream {
		o.JetStream = true
		o.JetStreamDomain = cfg.domain
		o.StoreDir = filepath.Join(n.c.dir, "js", n.name)
		if len(n.c.nodes) == 1 {
			// A lone node with a cluster block would wait for JetStream
			// peers that never come: run it as a plain server.
			o.Cluster = server.ClusterOpts{}
		}
	}
	switch {
	case cfg.accounts != "":
		// Parsed for each node: the server takes the accounts it is
		// given as its own, so nodes must not share them.
		if err := parseAccounts(o, cfg.accounts); err != nil {
			return nil, fmt.Errorf("natstest: node %s: accounts: %w", n.name, err)
		}
	case cfg.user != "":
		o.Username, o.Password = cfg.user, cfg.password
	}
	if n.c.ca != nil {
		o.TLS = true
		o.TLSConfig = n.c.ca.ServerConfig()
		o.TLSTimeout = 5
	}
	return o, nil
}

func (n *Node) start(ctx context.Context) error {
	o, err := n.options()
	if err != nil {
		return err
	}
	var srv *server.Server
	// The ports come from the cluster's own blocks (see ports.Blocks), so
	// only a program that binds them explicitly can hold them; wait a while
	// for it to let go, and say which port is taken if it does not.
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := ports.Free(n.clientPort, n.clusterPort)
		if err == nil {
			srv, err = server.NewServer(o)
			if err != nil {
				return fmt.Errorf("natstest: node %s: %w", n.name, err)
			}
			if n.c.cfg.Logger.GetLevel() != zerolog.Disabled {
				srv.SetLoggerV2(&serverLogger{l: n.c.cfg.Logger.With().Str("node", n.name).Logger()}, false, false, false)
			}
			srv.Start()
			if srv.ReadyForConnections(5 * time.Second) {
				break
			}
			srv.Shutdown()
			err = fmt.Errorf("not ready for connections")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natstest: node %s did not start on ports %d (client) and %d (cluster): %w",
				n.name, n.clientPort, n.clusterPort, err)
		}
		if cerr := ctxtime.Sleep(ctx, 100*time.Millisecond); cerr != nil {
			return fmt.Errorf("natstest: node %s did not start on ports %d (client) and %d (cluster): %w",
				n.name, n.clientPort, n.clusterPort, errors.Join(cerr, err))
		}
	}
	n.mu.Lock()
	n.srv = srv
	n.ldmDone = nil
	n.mu.Unlock()
	return nil
}

// CA returns the certificate authority of a cluster started WithTLS, or nil.
func (c *Cluster) CA() *CA { return c.ca }

// Dir returns the directory that holds the cluster's state.
func (c *Cluster) Dir() string { return c.dir }

// Nodes returns the cluster's nodes in order.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Node returns the i-th node (0-based).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// URLs returns every node's client URL (through its proxy if the cluster
// has proxies).
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.URL()
	}
	return urls
}

// NodeByServerID returns the running node whose server ID is id, or nil.
func (c *Cluster) NodeByServerID(id string) *Node {
	for _, n := range c.nodes {
		if n.ServerID() == id {
			return n
		}
	}
	return nil
}

// NodeByURL returns the node whose client URL or direct URL has the same
// host:port as u, or nil.
func (c *Cluster) NodeByURL(u string) *Node {
	hp := hostPort(u)
	for _, n := range c.nodes {
		if hostPort(n.URL()) == hp || hostPort(n.DirectURL()) == hp {
			return n
		}
	}
	return nil
}

func hostPort(u string) string {
	if pu, err := url.Parse(u); err == nil && pu.Host != "" {
		return pu.Host
	}
	return u
}

// ClientOptions returns nats.go options that a client of this cluster
// needs: the CA when the cluster serves TLS, the user (WithUser, or the
// probes' user of WithAccounts).
func (c *Cluster) ClientOptions() []nats.Option {
	var opts []nats.Option
	if c.ca != nil {
		opts = append(opts, nats.Secure(c.ca.ClientConfig()))
	}
	if c.cfg.user != "" {
		opts = append(opts, nats.UserInfo(c.cfg.user, c.cfg.password))
	}
	return opts
}

// WaitReady waits until every running node forwards to every other running
// node end to end, and, with JetStream, until every node answers the
// JetStream API.
func (c *Cluster) WaitReady(ctx context.Context) error {
	var lastErr error
	for {
		err := c.probe(ctx)
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("natstest: cluster not ready: %w (last probe: %v)", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) probe(ctx context.Context) error {
	var running []*Node
	for _, n := range c.nodes {
		if n.Running() {
			running = append(running, n)
		}
	}
	if len(running) == 0 {
		return errors.New("no node is running")
	}
	conns := make([]*nats.Conn, len(running))
	defer func() {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
	}()
	subs := make([]chan *nats.Msg, len(running))
	token := nats.NewInbox()
	for i, n := range running {
		opts := append(c.ClientOptions(), nats.Name("testcluster-probe"), nats.NoReconnect(), nats.Timeout(2*time.Second))
		nc, err := nats.Connect(n.DirectURL(), opts...)
		if err != nil {
			return fmt.Errorf("connect %s: %w", n.name, err)
		}
		conns[i] = nc
		subs[i] = make(chan *nats.Msg, len(running)*2)
		if _, err := nc.ChanSubscribe(token+"."+n.name, subs[i]); err != nil {
			return err
		}
		if err := nc.FlushTimeout(2 * time.Second); err != nil {
			return err
		}
	}
	for _, from := range conns {
		for _, to := range running {
			if err := from.Publish(token+"."+to.name, nil); err != nil {
				return err
			}
		}
		if err := from.FlushTimeout(2 * time.Second); err != nil {
			return err
		}
	}
	deadline := time.NewTimer(time.Second)
	defer deadline.Stop()
	for i, n := range running {
		for range running {
			select {
			case <-subs[i]:
			case <-deadline.C:
				return fmt.Errorf("node %s did not receive from every node", n.name)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if c.cfg.jetStream {
		for i, n := range running {
			m, err := conns[i].Request("$JS.API.INFO", nil, 2*time.Second)
			if err != nil {
				return fmt.Errorf("jetstream on %s: %w", n.name, err)
			}
			if len(m.Data) == 0 || bytes.Contains(m.Data, []byte(`"error"`)) {
				return fmt.Errorf("jetstream on %s not ready: %s", n.name, m.Data)
			}
		}
		if len(running) > 1 && 2*len(running) > len(c.nodes) {
			// With a quorum up there is a meta leader to ask; without one
			// JetStream cannot place anything, and the caller knows why.
			return metaSeesAll(running)
		}
	}
	return nil
}

// metaSeesAll reports whether the JetStream meta leader sees every running
// node online and current. Every node answering the JetStream API is not
// enough: until the leader has heard from a peer it places no replica
// there, and an R3 stream created at once failed with "no suitable peers
// for placement".
func metaSeesAll(running []*Node) error {
	for _, n := range running {
		srv := n.Server()
		if srv == nil || !srv.JetStreamIsLeader() {
			continue
		}
		jsz, err := srv.Jsz(nil)
		if err != nil {
			return fmt.Errorf("jetstream meta leader %s: %w", n.name, err)
		}
		seen := map[string]bool{srv.Name(): true}
		if jsz.Meta != nil {
			for _, r := range jsz.Meta.Replicas {
				if r.Current && !r.Offline {
					seen[r.Name] = true
				}
			}
		}
		for _, m := range running {
			if srv := m.Server(); srv == nil || !seen[srv.Name()] {
				return fmt.Errorf("jetstream meta leader %s does not see %s online and current yet", n.name, m.name)
			}
		}
		return nil
	}
	return errors.New("jetstream has no meta leader yet")
}

// Close shuts every node down and removes the temporary state directory.
// It is idempotent.
func (c *Cluster) Close() {
	c.closeMu.Lock()
	if c.closed {
		c.closeMu.Unlock()
		return
	}
	c.closed = true
	c.closeMu.Unlock()
	for _, n := range c.nodes {
		n.Kill()
		if n.proxy != nil {
			n.proxy.Close()
		}
		if n.leafProxy != nil {
			n.leafProxy.Close()
		}
	}
	c.ports.Release()
	if c.ownDir {
		os.RemoveAll(c.dir)
	}
}

// Name returns the node's server name (n1, n2, ...).
func (n *Node) Name() string { return n.name }

// Index returns the node's position in the cluster (0-based).
func (n *Node) Index() int { return n.index }

// URL returns the URL clients should use: through the proxy if there is one.
func (n *Node) URL() string {
	if n.proxy != nil {
		return "nats://" + n.proxy.Addr()
	}
	return n.DirectURL()
}

// DirectURL returns the node's own client URL, bypassing any proxy.
func (n *Node) DirectURL() string {
	return "nats://127.0.0.1:" + strconv.Itoa(n.clientPort)
}

// Proxy returns the faultproxy.Proxy in front of the node, or nil.
func (n *Node) Proxy() *faultproxy.Proxy { return n.proxy }

// LeafURL returns the URL of the node's leaf node port, through its proxy
// (WithLeafListen), or "" without one.
func (n *Node) LeafURL() string {
	if n.leafProxy == nil {
		return ""
	}
	return "nats-leaf://" + n.leafProxy.Addr()
}

// LeafProxy returns the faultproxy.Proxy in front of the node's leaf node
// port (WithLeafListen), or nil.
func (n *Node) LeafProxy() *faultproxy.Proxy { return n.leafProxy }

// Server returns the running server, or nil if the node is down.
func (n *Node) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// ServerID returns the running server's ID, or "" if the node is down. A
// restarted node has a new ID.
func (n *Node) ServerID() string {
	if s := n.Server(); s != nil && s.Running() {
		return s.ID()
	}
	return ""
}

// Running reports whether the node's server is up and not shutting down.
func (n *Node) Running() bool {
	s := n.Server()
	return s != nil && s.Running()
}

// EnterLameDuck puts the node into lame-duck mode and returns at once. The
// node stops accepting clients, tells its clients, evicts them after the
// grace period and shuts down. The returned channel is closed when the
// server has shut down.
func (n *Node) EnterLameDuck() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ldmDone != nil {
		return n.ldmDone
	}
	done := make(chan struct{})
	n.ldmDone = done
	srv := n.srv
	if srv == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		srv.LameDuckShutdown()
		srv.WaitForShutdown()
	}()
	return done
}

// LDMClientByID sends the lame-duck notice to one client connection of this
// node, identified by its server-side client ID, without putting the node
// into LDM.
func (n *Node) LDMClientByID(cid uint64) error {
	s := n.Server()
	if s == nil {
		return fmt.Errorf("natstest: node %s is down", n.name)
	}
	return s.LDMClientByID(cid)
}

// ClientIDs returns the server-side IDs of the node's client connections
// whose connection name is name (all clients if name is empty).
func (n *Node) ClientIDs(name string) []uint64 {
	s := n.Server()
	if s == nil {
		return nil
	}
	cz, err := s.Connz(&server.ConnzOptions{Limit: 1 << 16})
	if err != nil {
		return nil
	}
	var ids []uint64
	for _, ci := range cz.Conns {
		if name == "" || ci.Name == name {
			ids = append(ids, ci.Cid)
		}
	}
	return ids
}

// Kill shuts the node down abruptly: its sockets are closed without a
// lame-duck notice. It waits for the shutdown to finish.
func (n *Node) Kill() {
	n.mu.Lock()
	srv := n.srv
	n.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Shutdown()
	srv.WaitForShutdown()
}

// Restart starts a stopped (killed or lame-ducked) node on its old ports
// and waits until the cluster forwards end to end again. A running node is
// killed first.
func (n *Node) Restart(ctx context.Context) error {
	n.Kill()
	n.mu.Lock()
	done := n.ldmDone
	n.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := n.start(ctx); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, n.c.cfg.ReadyWait)
	defer cancel()
	return n.c.WaitReady(wctx)
}

// serverLogger adapts zerolog to nats-server's Logger interface.
type serverLogger struct{ l zerolog.Logger }

func (s *serverLogger) Noticef(format string, v ...any) { s.l.Info().Msgf(format, v...) }
func (s *serverLogger) Warnf(format string, v ...any)   { s.l.Warn().Msgf(format, v...) }
func (s *serverLogger) Fatalf(format string, v ...any)  { s.l.Error().Msgf(format, v...) }
func (s *serverLogger) Errorf(format string, v ...any)  { s.l.Error().Msgf(format, v...) }
func (s *serverLogger) Debugf(format string, v ...any)  { s.l.Debug().Msgf(format, v...) }
func (s *serverLogger) Tracef(format string, v ...any)  { s.l.Trace().Msgf(format, v...) }
