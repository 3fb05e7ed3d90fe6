package uaclient

import (
	"context"
	"net"
	"sync"
	"syscall"

	"github.com/gopcua/opcua/uacp"
)

// dialer returns the UACP dialer of one connect attempt, and a release to
// call when the attempt is over. gopcua v0.8.0's HEL/ACK handshake reads
// without looking at the dial context, so a connect to a frozen link would
// hold the session, and Pair.Close, until the connect timeout (measured:
// 9.7 s). The dialer's sockets are shut down when the session's context
// ends, which ends that read at once.
func (c *conn) dialer() (d *uacp.Dialer, release func()) {
	var mu sync.Mutex
	var stops []func() bool
	nd := &net.Dialer{
		Timeout: c.dialTimeout,
		ControlContext: func(_ context.Context, _, _ string, rc syscall.RawConn) error {
			stop := context.AfterFunc(c.ctx, func() { abortConn(rc) })
			mu.Lock()
			stops = append(stops, stop)
			mu.Unlock()
			return nil
		},
	}
	// A copy: gopcua's buffer-size options write to the ACK they are
	// given, and the default one is shared by every client.
	ack := *uacp.DefaultClientACK
	return &uacp.Dialer{Dialer: nd, ClientACK: &ack}, func() {
		mu.Lock()
		defer mu.Unlock()
		for _, stop := range stops {
			stop()
		}
	}
}
