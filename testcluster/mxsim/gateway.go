package mxsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"github.com/apbridge/apbridge/testcluster/internal/ports"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
)

// The MxAccess gateway's defaults, as the real gateway documents them.
const (
	// DefaultCommandTimeout is a Gateway session's command timeout when
	// OpenSession asks for none (see SetDefaultCommandTimeout).
	DefaultCommandTimeout = 30 * time.Second
	// DefaultHeartbeat is how often an idle event stream gets a
	// Heartbeat (see SetHeartbeatInterval).
	DefaultHeartbeat = time.Second
	// DefaultEventQueue is how many events a session holds for its
	// subscriber before it faults (see SetEventQueueSize).
	DefaultEventQueue = 10000
	// MaxPending is how many commands a session takes at once, the one
	// running included; Invoke refuses more with RESOURCE_EXHAUSTED.
	MaxPending = 128
	// ProtocolVersion is the gateway_protocol_version a Gateway
	// reports.
	ProtocolVersion = 1
	// CapBulkSubscribeSupervisory is the capability of a gateway whose
	// SubscribeBulk honours supervisory=true. Without it the flag is
	// ignored and the items are advised plainly, as an older gateway does.
	CapBulkSubscribeSupervisory = "bulk-subscribe-supervisory"
	// CapEventResume: a session whose event stream broke is kept, and a
	// new stream may resume after the last event its client received.
	CapEventResume = "event-resume"
	// CapPing: the gateway runs PingCommand. Without it a Ping is refused
	// INVALID_ARGUMENT, as a command the gateway does not know.
	CapPing = "ping-command"
	// CapHeartbeat: the gateway sends a Heartbeat on an idle stream.
	// Without it it sends none, though its open reply still carries the
	// heartbeat interval: a gateway that does not know the field may
	// carry anything at its number, and a client must not trust it.
	CapHeartbeat = "stream-heartbeats"
)

// BaseCapabilities returns the nine capabilities of today's gateway, with
// none of apbridge's (event resume, ping, heartbeats) and without
// CapBulkSubscribeSupervisory. The slice is the caller's.
func BaseCapabilities() []string {
	return []string{
		"unary-open-session", "unary-close-session", "unary-invoke",
		"server-stream-events", "bulk-subscribe-commands", "bulk-read-commands",
		"bulk-write-commands", "unary-acknowledge-alarm", "server-stream-active-alarms",
	}
}

// DefaultCapabilities returns the capabilities a Gateway advertises
// unless SetCapabilities says otherwise: BaseCapabilities,
// CapBulkSubscribeSupervisory and apbridge's own (CapEventResume, CapPing,
// CapHeartbeat). The slice is the caller's.
func DefaultCapabilities() []string {
	return append(BaseCapabilities(), CapBulkSubscribeSupervisory, CapEventResume, CapPing, CapHeartbeat)
}

// Gateway simulates an MxAccess gateway: the gRPC service of
// mxaccess_gateway.v1 on a loopback TCP port, in front of a Data. Like
// the real one it runs every session's commands one at a time on a worker
// of the session's own (MXAccess is single-threaded), bounds the commands
// queued, times them out, and faults a session whose event queue overflows.
// Kill, Restart and EndStreams play the gateway's process dying, coming
// back and shutting down gracefully.
//
// The Set methods change the gateway at once; those that describe a
// session (capabilities, timeouts, heartbeat, queue size) apply to sessions
// opened afterwards, as a reconfigured gateway would.
//
// All methods are safe for concurrent use.
type Gateway struct {
	data      *Data
	log       zerolog.Logger
	readyWait time.Duration
	ports     ports.Blocks // the port, ours until Close so that Restart gets it back
	addr      string

	lifeMu sync.Mutex // serialises Kill, Restart, EndStreams and Close

	mu        sync.Mutex
	srv       *grpc.Server  // nil while down
	serving   chan struct{} // closed when srv's Serve returns
	closed    bool
	gen       int // one more for every start, so that old session IDs are unknown
	nextID    int
	sessions  map[string]*mxSession
	name      string
	caps      []string
	timeout   time.Duration
	heartbeat time.Duration
	queueSize int
	// resumeWindow is how long a session whose stream went is kept; 0
	// keeps it until it is closed.
	resumeWindow time.Duration
	latency      time.Duration
	latencyCh    chan struct{} // closed and replaced when the latency changes
	onCommand    func(session, kind string)

	nextServer atomic.Int32 // server handles, unique on the gateway
	workers    sync.WaitGroup
	stats      mxStats
}

// Start starts a gateway over data on a free loopback port. It takes no
// client round-trip time, unlike natstest.Start and uaserver.StartPair:
// SetCommandLatency delays the commands instead. The gateway's own
// settings have Set methods.
func Start(data *Data, opts ...Option) (*Gateway, error) {
	if data == nil {
		return nil, errors.New("mxsim: Start: nil Data")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		data:      data,
		readyWait: cfg.ReadyWait,
		sessions:  map[string]*mxSession{},
		caps:      DefaultCapabilities(),
		timeout:   DefaultCommandTimeout,
		heartbeat: DefaultHeartbeat,
		queueSize: DefaultEventQueue,
		latencyCh: make(chan struct{}),
	}
	g.stats.reset()
	ln, err := g.ports.Listen()
	if err != nil {
		g.ports.Release()
		return nil, fmt.Errorf("mxsim: gateway listen: %w", err)
	}
	g.addr = ln.Addr().String()
	_, port, _ := net.SplitHostPort(g.addr)
	g.name = "mxgw-" + port
	g.log = cfg.Logger.With().Str("mxgw", g.addr).Logger()
	g.serve(ln)
	data.addListener(g)
	g.log.Info().Msg("mxsim: gateway up")
	return g, nil
}

// Addr returns the gateway's host:port. It stays the same across Kill and
// Restart.
func (g *Gateway) Addr() string { return g.addr }

// Data returns the data the gateway serves.
func (g *Gateway) Data() *Data { return g.data }

// Running reports whether the gateway is up (not killed or closed).
func (g *Gateway) Running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.srv != nil
}

// ---- settings ----

// SetName sets the gateway_id that OpenSession reports (default
// "mxgw-<port>").
func (g *Gateway) SetName(name string) {
	g.mu.Lock()
	g.name = name
	g.mu.Unlock()
}

// SetCapabilities replaces the capabilities advertised to new sessions
// (default DefaultCapabilities). A session whose gateway did not
// advertise CapBulkSubscribeSupervisory gets plain advises from a
// supervisory SubscribeBulk.
func (g *Gateway) SetCapabilities(caps []string) {
	g.mu.Lock()
	g.caps = slices.Clone(caps)
	g.mu.Unlock()
}

// SetDefaultCommandTimeout sets the command timeout of new sessions that
// ask for none (default DefaultCommandTimeout). It panics unless d > 0.
func (g *Gateway) SetDefaultCommandTimeout(d time.Duration) {
	if d <= 0 {
		panic(fmt.Sprintf("mxsim: SetDefaultCommandTimeout(%v): the timeout must be positive", d))
	}
	g.mu.Lock()
	g.timeout = d
	g.mu.Unlock()
}

// SetHeartbeatInterval sets how long the event stream of a new session
// stays idle before the gateway sends a Heartbeat (default
// DefaultHeartbeat; 0 sends none). It panics if d < 0.
func (g *Gateway) SetHeartbeatInterval(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("mxsim: SetHeartbeatInterval(%v): the interval cannot be negative", d))
	}
	g.mu.Lock()
	g.heartbeat = d
	g.mu.Unlock()
}

// SetEventQueueSize sets how many events a new session holds for its
// subscriber (default DefaultEventQueue); one more faults the session.
// A small queue makes the overflow fault easy to reach. It panics if
// n < 1.
func (g *Gateway) SetEventQueueSize(n int) {
	if n < 1 {
		panic(fmt.Sprintf("mxsim: SetEventQueueSize(%d): a queue holds at least 1 event", n))
	}
	g.mu.Lock()
	g.queueSize = n
	g.mu.Unlock()
}

// SetResumeWindow makes the gateway end a session whose event stream has
// had no subscriber for d (from its open, or its last subscriber's end) (default 0: it keeps the session until it is
// closed, or the gateway stops): a client that died leaves its session
// behind, and a gateway keeps it only so long for a successor to resume.
// It applies to sessions opened afterwards. It panics if d < 0.
func (g *Gateway) SetResumeWindow(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("mxsim: SetResumeWindow(%v): the window cannot be negative", d))
	}
	g.mu.Lock()
	g.resumeWindow = d
	g.mu.Unlock()
}

// SetCommandLatency makes every command take d on its worker before it
// runs (default 0): a slow MXAccess, or with a long d a wedged one. A
// change applies at once, to the command being delayed too, so that
// setting 0 releases a wedged worker promptly. It panics if d < 0.
func (g *Gateway) SetCommandLatency(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("mxsim: SetCommandLatency(%v): the latency cannot be negative", d))
	}
	g.mu.Lock()
	g.latency = d
	close(g.latencyCh)
	g.latencyCh = make(chan struct{})
	g.mu.Unlock()
}

// OnCommand calls f on the worker each time a worker starts a command,
// before the command latency, with the session's ID and the command's kind
// (see Stats.CommandsByKind); nil removes the hook. It lets a test
// know that a worker has picked a command up. f must not block for long:
// the worker waits for it.
func (g *Gateway) OnCommand(f func(session, kind string)) {
	g.mu.Lock()
	g.onCommand = f
	g.mu.Unlock()
}

// commandLatency returns the latency and a channel closed when it changes.
func (g *Gateway) commandLatency() (time.Duration, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.latency, g.latencyCh
}

func (g *Gateway) commandHook() func(session, kind string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.onCommand
}

// ---- lifecycle ----

// serve starts a gRPC server of a new generation on ln.
func (g *Gateway) serve(ln net.Listener) {
	// WaitForHandlers makes Stop wait for the handlers to return, so that
	// Kill and Close leave no goroutine of theirs behind.
	srv := grpc.NewServer(grpc.WaitForHandlers(true))
	mxpb.RegisterMxAccessGatewayServer(srv, &mxService{g: g})
	serving := make(chan struct{})
	g.mu.Lock()
	g.srv, g.serving = srv, serving
	g.gen++
	g.mu.Unlock()
	go func() {
		defer close(serving)
		if err := srv.Serve(ln); err != nil {
			g.log.Debug().Err(err).Msg("mxsim: gateway serve ended")
		}
	}()
}

// Kill stops the gateway abruptly, as its process dying: the port closes,
// connections break without a graceful end (clients see UNAVAILABLE) and
// every session is lost. It returns when the gateway is down. Restart
// brings it back.
func (g *Gateway) Kill() {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	g.kill("killed")
}

func (g *Gateway) kill(why string) {
	g.mu.Lock()
	srv, serving := g.srv, g.serving
	g.srv = nil
	g.mu.Unlock()
	if srv == nil {
		return
	}
	// Stop first: a session ended while its stream is still up would end
	// the stream gracefully, which is not what a dying process does.
	srv.Stop()
	<-serving
	g.endSessions(mxEndKilled)
	g.log.Info().Str("why", why).Msg("mxsim: gateway down")
}

// Restart starts a killed gateway again on the same address, with no
// sessions and the same data and settings, and returns once it listens.
// A running gateway is killed first. If the port is briefly unavailable it
// retries, for at most the WithReadyTimeout duration.
func (g *Gateway) Restart() error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	g.kill("restart")
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.readyWait)
	defer cancel()
	for {
		// The port was ours a moment ago; the kernel may take a moment to
		// let go of it.
		ln, err := net.Listen("tcp", g.addr)
		if err == nil {
			g.serve(ln)
			g.log.Info().Msg("mxsim: gateway restarted")
			return nil
		}
		if werr := ctxtime.Sleep(ctx, 20*time.Millisecond); werr != nil {
			return fmt.Errorf("mxsim: gateway restart on %s: %w (last: %v)", g.addr, werr, err)
		}
	}
}

// EndStreams ends every session the way a gateway shutting down
// gracefully does: each event stream delivers what it holds and ends with
// status OK (the client's Recv returns io.EOF), and the sessions are gone.
// The gateway itself stays up for new sessions.
func (g *Gateway) EndStreams() {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	n := g.endSessions(mxEndGraceful)
	g.log.Info().Int("sessions", n).Msg("mxsim: gateway ended its sessions")
}

// ErrClosed is returned by Restart after Close.
var ErrClosed = errors.New("mxsim: gateway closed")

// Close stops the gateway for good and waits for all its goroutines. It
// can be called more than once.
func (g *Gateway) Close() {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	g.mu.Unlock()
	g.kill("closed")
	g.data.removeListener(g)
	g.workers.Wait()
	g.ports.Release()
}

// endSessions ends every session for reason and waits for their workers.
// It returns how many there were.
func (g *Gateway) endSessions(reason mxEndReason) int {
	all := g.openSessions()
	for _, s := range all {
		s.end(reason)
	}
	for _, s := range all {
		<-s.workerDone
	}
	g.openSessions() // forgets them
	return len(all)
}

// ---- sessions ----

// newSession opens a session with the gateway's current settings.
// timeout is the one the client asked for, 0 for the default.
func (g *Gateway) newSession(client string, writeUser int32, timeout time.Duration) (*mxSession, *mxpb.OpenSessionReply) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if timeout == 0 {
		timeout = g.timeout
	}
	g.nextID++
	s := &mxSession{
		g:          g,
		id:         g.name + "/" + strconv.Itoa(g.gen) + "/" + strconv.Itoa(g.nextID),
		client:     client,
		writeUser:  writeUser,
		timeout:    timeout,
		heartbeat:  g.heartbeat,
		bulkSup:    slices.Contains(g.caps, CapBulkSubscribeSupervisory),
		resumable:  slices.Contains(g.caps, CapEventResume),
		ping:       slices.Contains(g.caps, CapPing),
		beats:      slices.Contains(g.caps, CapHeartbeat),
		window:     g.resumeWindow,
		cmds:       make(chan *mxCall, MaxPending),
		events:     make(chan *mxpb.MxEvent, g.queueSize),
		done:       make(chan struct{}),
		workerDone: make(chan struct{}),
		items:      map[int32]*mxItem{},
		byAddr:     map[string]*mxItem{},
	}
	g.sessions[s.id] = s
	s.mu.Lock()
	s.armOrphanLocked() // a client may die before it streams
	s.mu.Unlock()
	g.workers.Add(1)
	go s.work()
	return s, s.openReply(g.name, g.caps)
}

// session returns the open session id, or nil. An ended session is
// forgotten here: the paths that end a session (a fault among them) do not
// take the gateway's lock.
func (g *Gateway) session(id string) *mxSession {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[id]
	if s != nil && s.endReason() != mxOpen {
		delete(g.sessions, id)
		return nil
	}
	return s
}

// openSessions returns the open sessions, forgetting the ended ones.
func (g *Gateway) openSessions() []*mxSession {
	g.mu.Lock()
	defer g.mu.Unlock()
	all := make([]*mxSession, 0, len(g.sessions))
	for id, s := range g.sessions {
		if s.endReason() != mxOpen {
			delete(g.sessions, id)
			continue
		}
		all = append(all, s)
	}
	return all
}

// dataChanged hands a batch of changes to the sessions that advised the
// items. The data's lock is held, which keeps each item's changes in
// order.
func (g *Gateway) dataChanged(batch []*mxSample) {
	for _, s := range g.openSessions() {
		s.dataChanged(batch)
	}
}

// String names the gateway and its address, for logs and test failure
// messages.
func (g *Gateway) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return "mx gateway " + g.name + " " + g.addr
}
