package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoServer echoes every line back until its listener is closed.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) (*Proxy, net.Conn, *bufio.Reader) {
	t.Helper()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	c.SetDeadline(start.Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		t.Fatalf("echo = %q", line)
	}
	return time.Since(start), nil
}

func TestProxyForwardsAndDelays(t *testing.T) {
	p, c, r := newProxy(t)
	if d, err := roundTrip(t, c, r, time.Second); err != nil || d > 50*time.Millisecond {
		t.Fatalf("plain round trip %v, %v", d, err)
	}
	p.SetDelay(30 * time.Millisecond)
	d, err := roundTrip(t, c, r, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d < 60*time.Millisecond || d > 200*time.Millisecond {
		t.Fatalf("round trip with 30ms each way = %v", d)
	}
	if p.Conns() != 1 || p.Accepted() != 1 {
		t.Fatalf("conns=%d accepted=%d", p.Conns(), p.Accepted())
	}
}

func TestProxyFreezeHoldsBytesUntilHeal(t *testing.T) {
	p, c, r := newProxy(t)
	if _, err := roundTrip(t, c, r, time.Second); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	if !p.Frozen() {
		t.Fatal("not frozen")
	}
	if _, err := roundTrip(t, c, r, 200*time.Millisecond); err == nil {
		t.Fatal("bytes crossed a frozen link")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("frozen link gave %v, want a timeout (no error, no data)", err)
	}
	p.Heal()
	// The ping written during the freeze arrives after it.
	c.SetReadDeadline(time.Now().Add(time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("held bytes after heal: %q, %v", line, err)
	}
	if _, err := roundTrip(t, c, r, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestProxyResetAndDrop(t *testing.T) {
	p, c, r := newProxy(t)
	if _, err := roundTrip(t, c, r, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("reset %d conns", n)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := r.ReadByte()
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after reset read gave %v, want ECONNRESET", err)
	}

	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if _, err := roundTrip(t, c2, r2, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.DropAll(); n != 1 {
		t.Fatalf("dropped %d conns", n)
	}
	c2.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := r2.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after drop read gave %v, want EOF", err)
	}
}

func TestProxyRefuse(t *testing.T) {
	p, _, _ := newProxy(t)
	p.Refuse()
	c, err := net.Dial("tcp", p.Addr())
	if err == nil {
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil {
		t.Fatal("a refusing proxy passed a connection")
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(t, c3, bufio.NewReader(c3), time.Second); err != nil {
		t.Fatal(err)
	}
}
