package uaserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// Server is one server of a Pair: an OPC UA server on a loopback port
// behind a faultproxy.Proxy, whose address is the server's stable
// endpoint.
//
// All methods are safe for concurrent use.
type Server struct {
	pair     *Pair
	index    int
	name     string
	uri      string
	log      zerolog.Logger
	space    *uaSpace
	eng      *uaEngine
	ln       net.Listener // the server's own port, reached only through the proxy
	endpoint string       // opc.tcp:// URL of the proxy
	addr     string       // the proxy's host:port, kept across restarts

	nodeServiceLevel, nodeStatus, nodeCurrentTime, nodeState *uaNode
	tagNodes, setpointNodes                                  []*uaNode

	lvlMu   sync.Mutex // serialises level changes
	lvl     atomic.Pointer[levelState]
	lvlEnc  atomic.Int32  // LevelEncoding
	state   atomic.Uint32 // ua.ServerState
	started atomic.Int64  // unix nanoseconds of the last (re)start

	channelID, tokenID atomic.Uint32

	lifeMu sync.Mutex // serialises kill, restart and close

	mu      sync.Mutex
	proxy   *faultproxy.Proxy
	running bool
	closed  bool
	delay   time.Duration
	conns   map[*uaConn]struct{}
	script  *Script
	levelFn LevelFunc
	health  Health
	aliases []*faultproxy.Proxy        // see Alias
	partner *ua.ApplicationDescription // see SetPartner

	wg      sync.WaitGroup // accept loop and connection goroutines
	scripts sync.WaitGroup
}

// newServer builds server index of pair p and starts listening. The
// caller waits for it to be ready.
func newServer(p *Pair, index int) (*Server, error) {
	name := string(rune('A' + index))
	s := &Server{
		pair:  p,
		index: index,
		name:  name,
		uri:   p.cfg.uris[index],
		log:   p.cfg.Logger.With().Str("opcua", name).Logger(),
		conns: make(map[*uaConn]struct{}),
		health: Health{
			MemberUp: true, StoreReachable: true, PeerProbeOK: true, Primary: index == 0,
		},
	}
	s.channelID.Store(uint32(index+1) << 24)
	s.tokenID.Store(uint32(index+1) << 24)
	s.lvl.Store(&levelState{v: p.cfg.levels[index], at: time.Now()})
	s.started.Store(time.Now().UnixNano())
	s.eng = newUAEngine(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("uaserver: %s listen: %w", name, err)
	}
	s.ln = ln
	// The endpoint must survive Kill and Restart: its port comes from the
	// pair's own blocks (see ports.Blocks).
	pln, err := p.ports.Listen()
	if err != nil {
		ln.Close()
		return nil, err
	}
	px := faultproxy.NewOnListener(pln, ln.Addr().String())
	px.SetDelay(p.cfg.Delay)
	s.delay = p.cfg.Delay
	s.proxy, s.addr = px, px.Addr()
	s.endpoint = "opc.tcp://" + s.addr
	s.space = s.buildSpace()
	s.running = true
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Name returns "A" or "B".
func (s *Server) Name() string { return s.name }

// Index returns 0 for A and 1 for B.
func (s *Server) Index() int { return s.index }

// ApplicationURI returns the server's ApplicationUri, as listed in both
// servers' ServerArray.
func (s *Server) ApplicationURI() string { return s.uri }

// Endpoint returns the URL clients use, opc.tcp://127.0.0.1:<port>. It goes
// through the server's faultproxy.Proxy and stays the same across Kill and
// Restart.
func (s *Server) Endpoint() string { return s.endpoint }

// Alias opens another endpoint of the server: a loopback port of its own
// that forwards every connection to the server's endpoint, as a port
// forward, a NAT rule or a second address of the host does. A client given
// the endpoint and the alias has one server twice under two host:port
// pairs, which no check of the URLs can see: only what the server says of
// itself (its ApplicationUri) gives it away. It returns the alias's
// opc.tcp:// URL and its proxy (to break its links on their own). The
// alias forwards to the endpoint, so it follows the server across Kill
// and Restart; it closes with the pair.
func (s *Server) Alias() (string, *faultproxy.Proxy, error) {
	px, err := faultproxy.New(s.addr)
	if err != nil {
		return "", nil, fmt.Errorf("uaserver: %s alias: %w", s.name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		px.Close()
		return "", nil, ErrPairClosed
	}
	s.aliases = append(s.aliases, px)
	return "opc.tcp://" + px.Addr(), px, nil
}

// Proxy returns the faultproxy.Proxy in front of the server, or nil while
// the server is down. A restart puts a new proxy on the same address; the
// latency set with SetLatency carries over, a freeze does not.
func (s *Server) Proxy() *faultproxy.Proxy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proxy
}

// Running reports whether the server is up (not killed or stopped).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// Stats returns what the server has served.
func (s *Server) Stats() Stats { return s.eng.stats() }

// Subscriptions lists the server's live subscriptions, oldest first.
func (s *Server) Subscriptions() []SubscriptionInfo { return s.eng.subscriptions() }

// ErrPairClosed is returned by Restart, and by scripted events started,
// after the pair was closed.
var ErrPairClosed = errors.New("uaserver: pair closed")

// ---- process death and restart ----

// Kill kills the server's process: the port closes and every connection is
// closed, with no ServiceLevel 0 first; sessions and subscriptions are
// lost. It returns when the server is down. It cancels a running script.
func (s *Server) Kill() {
	s.stopScript()
	s.kill("killed")
}

func (s *Server) kill(why string) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return
	}
	s.running = false
	px := s.proxy
	s.proxy = nil
	conns := make([]*uaConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// The proxy owns the endpoint: closing it closes the port and the
	// clients' connections, which is what a client sees when a process
	// dies. gopcua's own Server.Close would leave the clients connected and
	// block for 10 s.
	px.Close()
	for _, c := range conns {
		c.close()
	}
	for _, c := range conns {
		<-c.done
	}
	s.eng.reset()
	s.log.Info().Str("why", why).Msg("uaserver: server down")
}

// Restart starts a server that is down again on its endpoint, publishing
// level, and returns once it answers a client's read. A running server is
// killed first. Clients must create new sessions, as after any server
// restart.
func (s *Server) Restart(ctx context.Context, level byte) error {
	s.stopScript()
	return s.restart(ctx, level)
}

func (s *Server) restart(ctx context.Context, level byte) error {
	s.kill("restart")
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrPairClosed
	}
	delay := s.delay
	s.mu.Unlock()
	s.lvlMu.Lock()
	s.lvl.Store(&levelState{v: level, at: time.Now()})
	s.lvlMu.Unlock()
	s.setState(ua.ServerStateRunning)
	s.started.Store(time.Now().UnixNano())
	var px *faultproxy.Proxy
	for {
		var err error
		// The port was ours a moment ago; retry briefly in case the
		// kernel has not let go of it.
		if px, err = faultproxy.NewOn(s.addr, s.ln.Addr().String()); err == nil {
			break
		}
		if err := ctxtime.Sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("uaserver: %s restart on %s: %w", s.name, s.addr, err)
		}
	}
	px.SetDelay(delay)
	s.mu.Lock()
	s.proxy, s.running = px, true
	s.mu.Unlock()
	s.log.Info().Uint8("level", level).Msg("uaserver: server restarted")
	wctx, cancel := context.WithTimeout(ctx, s.pair.cfg.ReadyWait)
	defer cancel()
	return s.waitReady(wctx)
}

// ---- link faults, through the proxy ----

func (s *Server) withProxy(f func(*faultproxy.Proxy) int) int {
	s.mu.Lock()
	px := s.proxy
	s.mu.Unlock()
	if px == nil {
		return 0
	}
	return f(px)
}

// ResetConns aborts every client connection with a TCP RST on both sides,
// as a firewall or a crashed middlebox does; the server stays up. It
// returns how many connections it reset.
func (s *Server) ResetConns() int { return s.withProxy((*faultproxy.Proxy).ResetAll) }

// ForgetSessions ends every session as its timeout would, then resets
// every client connection: what a blip longer than the session timeout
// leaves behind. With keepSubscriptions the sessions' subscriptions stay,
// for a TransferSubscriptions, until their lifetime runs out, as Part 4
// allows; without, they go with their sessions. It returns how many
// sessions it ended.
func (s *Server) ForgetSessions(keepSubscriptions bool) int {
	n := s.eng.forgetSessions(keepSubscriptions)
	s.ResetConns()
	return n
}

// DropConns closes every client connection normally (FIN); the server
// stays up. It returns how many connections it closed.
func (s *Server) DropConns() int { return s.withProxy((*faultproxy.Proxy).DropAll) }

// Freeze stops all traffic between clients and the server while every
// socket stays open: clients see neither data nor an error. Heal ends it.
func (s *Server) Freeze() { s.withProxy(func(p *faultproxy.Proxy) int { p.Freeze(); return 0 }) }

// Heal ends a freeze; the bytes held meanwhile are delivered.
func (s *Server) Heal() { s.withProxy(func(p *faultproxy.Proxy) int { p.Heal(); return 0 }) }

// SetLatency adds d of latency in each direction between clients and the
// server (a round trip costs 2*d more). It persists across restarts.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
	s.withProxy(func(p *faultproxy.Proxy) int { p.SetDelay(d); return 0 })
}

// ---- heartbeat, values ----

func (s *Server) setState(st ua.ServerState) {
	if ua.ServerState(s.state.Swap(uint32(st))) != st {
		s.eng.notify(s.nodeState, s.nodeStatus)
	}
}

func (s *Server) serverState() ua.ServerState { return ua.ServerState(s.state.Load()) }

func (s *Server) startTime() time.Time { return time.Unix(0, s.started.Load()) }

// heartbeat samples CurrentTime (and ServerStatus, which contains it) for
// subscribers: the heartbeat clients watch for gaps.
func (s *Server) heartbeat() {
	if s.Running() {
		s.eng.notify(s.nodeCurrentTime, s.nodeStatus)
	}
}

func (s *Server) buildInfo() *ua.BuildInfo {
	return &ua.BuildInfo{
		ProductURI:       "urn:apbridge:testcluster",
		ManufacturerName: "apbridge",
		ProductName:      "apbridge testcluster OPC UA server",
		SoftwareVersion:  "1",
		BuildNumber:      "1",
	}
}

func (s *Server) statusValue() *ua.DataValue {
	now := time.Now()
	st := &ua.ServerStatusDataType{
		StartTime:      s.startTime(),
		CurrentTime:    now,
		State:          s.serverState(),
		BuildInfo:      s.buildInfo(),
		ShutdownReason: ua.NewLocalizedText(""),
	}
	dv := &ua.DataValue{Value: ua.MustVariant(ua.NewExtensionObject(st)), SourceTimestamp: now, ServerTimestamp: now}
	dv.UpdateMask()
	return dv
}

// dataStatus is the status of the simulated tags: Bad_OutOfService while
// the server is below the Healthy band (Warm redundancy: the standby does
// not serve data). The value is still sent, so a consumer can see that the
// process itself goes on.
func (s *Server) dataStatus() ua.StatusCode {
	if s.Level() < healthyLevel {
		return ua.StatusBadOutOfService
	}
	return ua.StatusOK
}

func (s *Server) tagValue(i int) func() *ua.DataValue {
	return func() *ua.DataValue {
		t := s.pair.tick.Load()
		// The DataValue is built here rather than with gopcua's
		// DataValueFromValue, which drops the SourceTimestamp bit.
		dv := &ua.DataValue{Value: t.vals[i], Status: s.dataStatus(), SourceTimestamp: t.at, ServerTimestamp: time.Now()}
		dv.UpdateMask()
		return dv
	}
}

func (s *Server) setpointValue(j int) func() *ua.DataValue {
	return func() *ua.DataValue {
		v := s.pair.setVals[j].Load()
		dv := &ua.DataValue{Value: v.v, Status: s.dataStatus(), SourceTimestamp: v.at, ServerTimestamp: time.Now()}
		dv.UpdateMask()
		return dv
	}
}

// ---- readiness and close ----

// waitReady waits until a real client reads ServiceLevel through the
// proxy.
func (s *Server) waitReady(ctx context.Context) error {
	for {
		err := s.probe(ctx)
		if err == nil {
			return nil
		}
		if werr := ctxtime.Sleep(ctx, 20*time.Millisecond); werr != nil {
			return fmt.Errorf("uaserver: %s at %s not ready: %w (last probe: %v)", s.name, s.endpoint, werr, err)
		}
	}
}

func (s *Server) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := opcua.NewClient(s.endpoint,
		opcua.SecurityMode(ua.MessageSecurityModeNone),
		opcua.AutoReconnect(false),
		opcua.DialTimeout(time.Second),
		opcua.RequestTimeout(2*time.Second),
	)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if err := c.Connect(ctx); err != nil {
		return err
	}
	resp, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{
		NodeID: ua.NewNumericNodeID(0, id.Server_ServiceLevel), AttributeID: ua.AttributeIDValue,
	}}})
	if err != nil {
		return err
	}
	if len(resp.Results) != 1 {
		return fmt.Errorf("ServiceLevel read: %v", resp.Results)
	}
	if LevelEncoding(s.lvlEnc.Load()) != LevelAsByte {
		return nil // the read was answered: the server is up
	}
	if resp.Results[0].Status != ua.StatusOK {
		return fmt.Errorf("ServiceLevel read: %v", resp.Results)
	}
	if _, ok := resp.Results[0].Value.Value().(byte); !ok {
		return fmt.Errorf("ServiceLevel is %T, want a Byte", resp.Results[0].Value.Value())
	}
	return nil
}

// close stops the server for good and waits for all its goroutines.
func (s *Server) close() {
	s.mu.Lock()
	s.closed = true
	aliases := s.aliases
	s.aliases = nil
	s.mu.Unlock()
	for _, px := range aliases {
		px.Close()
	}
	s.stopScript()
	s.scripts.Wait()
	s.kill("pair closed")
	s.ln.Close()
	s.mu.Lock()
	conns := make([]*uaConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	s.wg.Wait()
	s.eng.stop()
}

// String names the server, its endpoint and its level, for logs and test
// failure messages.
func (s *Server) String() string {
	return "opcua " + s.name + " " + s.endpoint + " level " + strconv.Itoa(int(s.Level()))
}
