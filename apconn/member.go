package apconn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// member is one nats.Conn of a Conn: the active, the passive, or an old
// active being retired. Fields after nc are guarded by Conn.mu, except the
// atomics.
type member struct {
	gen       uint64
	nc        *nats.Conn
	probeSubj string

	role Role // 0 once retiring
	// srv is the broker nc is on. nats.go's reconnect handler rewrites it
	// while the member may still be dialed or proved on the executor, so it
	// is read without Conn.mu.
	srv      atomic.Pointer[Server]
	ldm      bool
	ldmAt    time.Time
	down     bool
	downAt   time.Time
	downWhy  Cause
	proven   bool
	lost     chan struct{} // closed when the link is found down
	retired  bool          // closed by the Conn on purpose
	forced   bool          // ForceReconnect issued after a link timeout
	attempts atomic.Int64
	rtt      rttWindow
	// epoch is nats.go's reconnect count when the publish path was last
	// (re)started on this member. A PONG proves the publishes before its
	// PING only if it came back on the socket that carried them: after a
	// reconnect, nats.go sends a queued PING on the new socket.
	epoch atomic.Uint64
}

// server returns the broker m is connected to, or was last.
func (m *member) server() Server {
	if s := m.srv.Load(); s != nil {
		return *s
	}
	return Server{}
}

func (m *member) setServer(s Server) { m.srv.Store(&s) }

// errNewSocket is returned by confirm when the member reconnected since its
// publishes were sent: they are replayed, not confirmed.
var errNewSocket = errors.New("apconn: connection was re-established since the publishes were sent")

// confirm sends a PING on m and, when the PONG came back on the socket that
// carried the publishes, marks them confirmed.
func (c *Conn) confirm(ctx context.Context, m *member) error {
	r0 := m.nc.Stats().Reconnects
	if r0 != m.epoch.Load() {
		return errNewSocket
	}
	mark := c.pub.mark()
	if err := c.flushMember(ctx, m); err != nil {
		return err
	}
	if m.nc.Stats().Reconnects != r0 {
		return errNewSocket
	}
	c.pub.confirm(m.gen, mark)
	return nil
}

func (m *member) ready() bool { return m != nil && !m.down && !m.retired && m.proven }

// hostPort returns the host:port part of a server URL, the key under which
// the Conn remembers servers.
func hostPort(u string) string {
	if !strings.Contains(u, "://") {
		u = "nats://" + u
	}
	pu, err := url.Parse(u)
	if err != nil {
		return u
	}
	return pu.Host
}

// validateURLs checks the configured servers before anything is dialled, so
// a typo is reported with the URL that has it.
func validateURLs(servers []string) ([]string, error) {
	var out []string
	for _, raw := range servers {
		for _, s := range strings.Split(raw, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			u := s
			if !strings.Contains(u, "://") {
				u = "nats://" + u
			}
			pu, err := url.Parse(u)
			if err != nil {
				return nil, &URLError{URL: s, Reason: err.Error()}
			}
			switch pu.Scheme {
			case "nats", "tls", "ws", "wss":
			default:
				return nil, &URLError{URL: s, Reason: fmt.Sprintf("scheme %q is not one of nats, tls, ws, wss", pu.Scheme)}
			}
			if pu.Hostname() == "" {
				return nil, &URLError{URL: s, Reason: "no host"}
			}
			if p := pu.Port(); p != "" {
				if _, err := net.LookupPort("tcp", p); err != nil {
					return nil, &URLError{URL: s, Reason: fmt.Sprintf("bad port %q", p)}
				}
			}
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		return nil, &URLError{URL: strings.Join(servers, ","), Reason: "no server URL given"}
	}
	return out, nil
}

// ctxDialer dials with the Conn's lifetime context, so Close aborts a
// connection attempt in progress instead of waiting for its timeout.
type ctxDialer struct {
	ctx context.Context
	d   net.Dialer

	mu      sync.Mutex
	lastErr error // the last failed dial, which nats.go reports only as ErrNoServers
}

func (d *ctxDialer) Dial(network, address string) (net.Conn, error) {
	conn, err := d.d.DialContext(d.ctx, network, address)
	if err != nil {
		d.mu.Lock()
		d.lastErr = err
		d.mu.Unlock()
	}
	return conn, err
}

// withDialError adds the last dial error to nats.go's bare "no servers
// available", so that a log line says why (refused, no such host, a
// timeout).
func (d *ctxDialer) withDialError(err error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lastErr == nil || !errors.Is(err, nats.ErrNoServers) {
		return err
	}
	return fmt.Errorf("%w (last dial: %v)", err, d.lastErr)
}

// dial opens a new member on the first of urls that accepts it.
func (c *Conn) dial(urls []string) (*member, error) {
	c.mu.Lock()
	c.nextGen++
	m := &member{gen: c.nextGen, lost: make(chan struct{})}
	c.mu.Unlock()
	m.probeSubj = "_APC." + c.id + "." + fmt.Sprint(m.gen)

	dialer := &ctxDialer{ctx: c.ctx, d: net.Dialer{Timeout: c.opts.connectTimeout}}
	opts := []nats.Option{
		nats.SetCustomDialer(dialer),
		nats.Timeout(c.opts.connectTimeout),
	}
	opts = append(opts, c.opts.natsOpts...)
	opts = append(opts,
		nats.Name(c.opts.name),
		nats.MaxReconnects(-1),
		nats.ReconnectToServer(c.steerFunc(m)),
		nats.LameDuckModeHandler(func(*nats.Conn) { c.onLameDuck(m) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { c.onDisconnect(m, err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { c.onReconnect(m, nc) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { c.onAsyncError(m, err) }),
		nats.FlusherTimeout(c.opts.livenessTimeout),
		// Our keeper checks liveness every second; nats.go's own pings stay
		// as a backstop.
		nats.PingInterval(30*time.Second),
	)
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		return nil, dialer.withDialError(err)
	}
	m.nc = nc
	m.setServer(serverOf(nc))
	if _, err := nc.Subscribe(m.probeSubj, c.onProbe); err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.proveTimeout)
	defer cancel()
	start := time.Now()
	if err := nc.FlushWithContext(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	m.rtt.add(time.Since(start))
	return m, nil
}

func serverOf(nc *nats.Conn) Server {
	s := Server{URL: nc.ConnectedUrlRedacted(), ID: nc.ConnectedServerId(), Name: nc.ConnectedServerName()}
	if id, err := nc.GetClientID(); err == nil {
		s.ClientID = id
	}
	return s
}

// closeMember closes m's connection on purpose; its handlers then ignore
// the disconnect.
func (c *Conn) closeMember(m *member) {
	c.mu.Lock()
	m.retired = true
	m.role = 0
	delete(c.members, m.gen)
	c.updateSteerLocked()
	subs := c.subsLocked()
	c.mu.Unlock()
	m.nc.Close()
	for _, s := range subs {
		s.endOverlap(m.gen)
	}
}

// prove sends a message each way between a and b through the cluster and
// waits for both: a route listed by the server is not proof that it
// forwards. On a 3-node nats-server v2.15.2 cluster on loopback, 5 runs of
// 27 had a node that listed all its routes yet took about 1 s before it
// forwarded to a peer's subscriber; one of them lost 428 messages.
func (c *Conn) prove(ctx context.Context, a, b *member) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.proveTimeout)
	defer cancel()
	ab, waitAB := c.expectProbe()
	ba, waitBA := c.expectProbe()
	defer c.forgetProbe(ab)
	defer c.forgetProbe(ba)
	// The probe subscriptions are new: the other broker learns of them
	// asynchronously, so a probe sent too early is dropped. Send again
	// until each arrives.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	gotAB, gotBA := false, false
	for !gotAB || !gotBA {
		if !gotAB {
			if err := a.nc.Publish(b.probeSubj, []byte(ab)); err != nil {
				return err
			}
		}
		if !gotBA {
			if err := b.nc.Publish(a.probeSubj, []byte(ba)); err != nil {
				return err
			}
		}
		select {
		case <-waitAB:
			gotAB, waitAB = true, nil
		case <-waitBA:
			gotBA, waitBA = true, nil
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("apconn: no end-to-end path between %s and %s: %w", a.server().Name, b.server().Name, ctx.Err())
		}
	}
	return nil
}

func (c *Conn) expectProbe() (string, chan struct{}) {
	tok := nats.NewInbox()[len(nats.InboxPrefix):]
	ch := make(chan struct{})
	c.probeMu.Lock()
	c.probes[tok] = ch
	c.probeMu.Unlock()
	return tok, ch
}

func (c *Conn) forgetProbe(tok string) {
	c.probeMu.Lock()
	delete(c.probes, tok)
	c.probeMu.Unlock()
}

func (c *Conn) onProbe(msg *nats.Msg) {
	c.probeMu.Lock()
	ch, ok := c.probes[string(msg.Data)]
	delete(c.probes, string(msg.Data))
	c.probeMu.Unlock()
	if ok {
		close(ch)
	}
}

// flushMember sends a PING on m and waits for the PONG. It reports whether
// the link answered: it gives up when a liveness timeout passes with
// neither the PONG nor any other byte from the broker, and in any case
// after maxBusyFactor timeouts.
//
// The PONG queues behind every message the broker sends the client first.
// On a loaded machine a backlog of them held it past the timeout while the
// link was plainly delivering, and the Conn replaced a live active; a
// frozen link carries nothing, and is still found within one timeout.
func (c *Conn) flushMember(ctx context.Context, m *member) error {
	// A PING on a connection that is not connected waits in nats.go's
	// pending buffer for a reconnect: it would only ever time out.
	if st := m.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("apconn: %s is %v", m.server().Name, st)
	}
	timeout := c.opts.livenessTimeout
	fctx, cancel := context.WithTimeout(ctx, maxBusyFactor*timeout)
	defer cancel()
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t := time.NewTicker(timeout)
		defer t.Stop()
		last := m.nc.Stats().InBytes
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			in := m.nc.Stats().InBytes
			if in == last {
				cancel()
				return
			}
			last = in
		}
	}()
	start := time.Now()
	err := m.nc.FlushWithContext(fctx)
	close(done)
	<-watched
	if err == nil {
		m.rtt.add(time.Since(start))
		return nil
	}
	if ctx.Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("apconn: %s: no PONG within %v: %w", m.server().Name, time.Since(start).Round(time.Millisecond), context.DeadlineExceeded)
	}
	return err
}

// maxBusyFactor bounds, in liveness timeouts, how long a link that keeps
// delivering may leave a PING unanswered before it counts as dead.
const maxBusyFactor = 4

// rttWindow keeps the smallest of the last few round trips: a PING queued
// behind a burst of publishes or a GC pause measures the queue, not the
// link, and the cutover waits for the link's latency difference only.
type rttWindow struct {
	mu      sync.Mutex
	samples [8]time.Duration
	n       int
}

func (w *rttWindow) add(d time.Duration) {
	w.mu.Lock()
	w.samples[w.n%len(w.samples)] = d
	w.n++
	w.mu.Unlock()
}

func (w *rttWindow) min() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := min(w.n, len(w.samples))
	if k == 0 {
		return 0
	}
	best := w.samples[0]
	for _, d := range w.samples[1:k] {
		best = min(best, d)
	}
	return best
}

// steerView is what the reconnect steering of nats.go may read. nats.go
// calls the steering function with the connection's lock held, so it must
// not take the Conn's lock: it reads this snapshot instead.
type steerView struct {
	closed       bool
	activeGen    uint64
	passiveReady bool
	avoid        map[string]bool // host:port of brokers in LDM, and the passive's
}

// parkDelay keeps a nats.Conn that the Conn will replace itself from racing
// it with a cold reconnect. Close and ForceReconnect cut it short.
const parkDelay = time.Hour

func (c *Conn) steerFunc(m *member) nats.ReconnectToServerHandler {
	return func(servers []nats.Server, _ nats.ServerInfo) (*nats.Server, time.Duration) {
		v := c.steer.Load()
		if len(servers) == 0 {
			return nil, 0
		}
		if v == nil || v.closed || m.gen != v.activeGen || v.passiveReady {
			// Not the active, or a passive is ready to take over: the
			// Conn promotes or re-arms on its own.
			return &servers[0], parkDelay
		}
		// The active with nobody to take over: reconnect as nats.go
		// would, avoiding brokers known to be in lame-duck mode.
		n := int(m.attempts.Add(1) - 1)
		pick := -1
		for i := range servers {
			j := (n + i) % len(servers)
			if !v.avoid[hostPort(servers[j].URL.String())] {
				pick = j
				break
			}
		}
		if pick < 0 {
			pick = n % len(servers)
		}
		var delay time.Duration
		if n >= len(servers) && n%len(servers) == 0 {
			delay = c.opts.reconnectWait + rand.N(c.opts.reconnectWait/2+1)
		}
		return &servers[pick], delay
	}
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}
