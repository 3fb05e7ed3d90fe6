package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy that sits in front of one server and injects
// network faults for real: added latency, connections reset (RST) or closed
// (FIN), and a frozen link that passes no bytes in either direction while
// both sockets stay open, as a blackholed route does. Heal undoes a freeze;
// bytes held during it are then delivered, as TCP would after a partition.
//
// A Proxy is safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu       sync.Mutex
	conns    map[*proxiedConn]struct{}
	delay    time.Duration
	frozen   chan struct{} // non-nil while frozen; closed by Heal
	refusing bool
	closed   bool
	accepted int

	wg sync.WaitGroup
}

// proxiedConn is one client connection and its upstream connection.
type proxiedConn struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the pair is closed
}

// New listens on a free loopback port and forwards each accepted
// connection to target (host:port).
func New(target string) (*Proxy, error) {
	return NewOn("127.0.0.1:0", target)
}

// NewOn is New with a chosen listen address, for a proxy that must come
// back on the port it had.
func NewOn(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen %s: %w", listen, err)
	}
	return NewOnListener(ln, target), nil
}

// NewOnListener is New serving on ln, which the proxy owns from now on
// (Close closes it): for a listener whose port was chosen by the caller,
// such as one of a block of ports held for restarts.
func NewOnListener(ln net.Listener, target string) *Proxy {
	p := &Proxy{target: target, ln: ln, conns: make(map[*proxiedConn]struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	return p
}

// Addr returns the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetDelay adds d of latency to each direction, so a round trip through the
// proxy costs 2*d more. Zero removes it. Bytes already queued keep their
// order.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Delay returns the one-way latency the proxy adds.
func (p *Proxy) Delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// Freeze stops forwarding in both directions without closing anything: the
// peers see a silent link, as with a blackholed route. New connections are
// accepted but pass nothing until Heal.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
	p.mu.Unlock()
}

// Heal ends a freeze and stops refusing connections.
func (p *Proxy) Heal() {
	p.mu.Lock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
	p.refusing = false
	p.mu.Unlock()
}

// Frozen reports whether the link is frozen.
func (p *Proxy) Frozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen != nil
}

// Refuse makes the proxy close every new connection at once, as a host
// with nothing listening does, until Heal.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	p.refusing = true
	p.mu.Unlock()
}

// ResetAll aborts every open connection with a TCP RST on both sides.
// It returns how many connections it reset.
func (p *Proxy) ResetAll() int { return p.closeAll(true) }

// DropAll closes every open connection normally (FIN) on both sides. It
// returns how many connections it closed.
func (p *Proxy) DropAll() int { return p.closeAll(false) }

// Conns returns the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted returns how many connections the proxy has accepted in all.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
	p.mu.Unlock()
	if !already {
		p.ln.Close()
	}
	p.closeAll(false)
	p.wg.Wait()
	return nil
}

func (p *Proxy) closeAll(reset bool) int {
	p.mu.Lock()
	conns := make([]*proxiedConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	n := 0
	for _, c := range conns {
		if c.close(reset) {
			n++
		}
	}
	return n
}

// close closes both sides; it reports whether this call closed them (a
// connection reset a moment ago is still in the map until its pipes end).
func (c *proxiedConn) close(reset bool) (closed bool) {
	c.once.Do(func() {
		closed = true
		close(c.done)
		if reset {
			for _, nc := range []net.Conn{c.client, c.server} {
				if tc, ok := nc.(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
			}
		}
		c.client.Close()
		c.server.Close()
	})
	return closed
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		refusing, closed := p.refusing, p.closed
		p.accepted++
		p.mu.Unlock()
		if refusing || closed {
			if tc, ok := cc.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			cc.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(cc)
	}
}

func (p *Proxy) serve(cc net.Conn) {
	defer p.wg.Done()
	sc, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		// The server behind the proxy is down: the client sees its
		// connection reset, as it would dialling the server directly.
		if tc, ok := cc.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		cc.Close()
		return
	}
	c := &proxiedConn{client: cc, server: sc, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close(false)
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, cc, sc) }()
	go func() { defer wg.Done(); p.pipe(c, sc, cc) }()
	wg.Wait()
	c.close(false)
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// chunk is a piece of the byte stream with the time it may be written.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst through a queue so that latency can be added
// without reordering and a freeze holds bytes instead of dropping them.
func (p *Proxy) pipe(c *proxiedConn, src, dst net.Conn) {
	q := make(chan chunk, 256)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for ch := range q {
			if d := time.Until(ch.due); d > 0 {
				time.Sleep(d)
			}
			if !p.waitThaw(c) {
				continue
			}
			if _, err := dst.Write(ch.data); err != nil {
				c.close(false)
				for range q {
				}
				return
			}
		}
		// Half-close so the peer sees EOF after the last byte.
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	buf := make([]byte, 32*1024)
	var last time.Time
	for p.waitThaw(c) {
		n, err := src.Read(buf)
		if n > 0 {
			data := make([]byte, n)
			copy(data, buf[:n])
			due := time.Now().Add(p.Delay())
			if due.Before(last) {
				due = last
			}
			last = due
			q <- chunk{data: data, due: due}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.close(false)
			}
			break
		}
	}
	close(q)
	<-writerDone
}

// waitThaw blocks while the proxy is frozen. It returns false if c was
// closed meanwhile.
func (p *Proxy) waitThaw(c *proxiedConn) bool {
	p.mu.Lock()
	ch := p.frozen
	p.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-c.done:
			return false
		}
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}
