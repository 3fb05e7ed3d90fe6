package uaserver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uacp"
	"github.com/gopcua/opcua/uasc"
)

const (
	// uaBufSize is the chunk size both sides use. The server sends every
	// response as one chunk (gopcua's uasc has no chunking for server
	// responses), so no response may exceed it; see uaConn.maxBody.
	uaBufSize = 0xffff
	// uaMaxMessage bounds a request the client sends in several chunks.
	uaMaxMessage = 8 << 20
	// uaMaxChunks bounds the chunks of one request.
	uaMaxChunks = 1024
	// uaHandshakeTimeout bounds the HEL/ACK exchange so that a peer that
	// connects and says nothing cannot hold a connection goroutine.
	uaHandshakeTimeout = 10 * time.Second
	// uaMsgOverhead is what a MSG chunk adds to an encoded response:
	// message header 12, security token 4, sequence header 8, type id 4,
	// and a margin.
	uaMsgOverhead = 64
)

// uaConn is one client connection: a UACP connection with one secure
// channel. Each connection has its own goroutine that reads requests and
// answers them, so a client that stops reading stalls only itself.
type uaConn struct {
	s   *Server
	tcp *net.TCPConn
	ucp *uacp.Conn
	sc  *uasc.SecureChannel
	// maxBody is the largest encoded response the client accepts in the
	// single chunk the server sends.
	maxBody int

	once sync.Once
	done chan struct{} // closed when the connection's goroutine has returned
}

func (c *uaConn) close() { c.once.Do(func() { c.tcp.Close() }) }

// acceptLoop accepts connections from the proxy until the listener is
// closed.
func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Accept errors other than a closed listener are transient
			// (EMFILE, ECONNABORTED): back off briefly instead of spinning.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c := &uaConn{s: s, tcp: nc.(*net.TCPConn), done: make(chan struct{})}
		s.mu.Lock()
		if !s.running || s.closed {
			// The process is dead: a connection that was in flight from
			// the proxy when it died is refused.
			s.mu.Unlock()
			c.tcp.SetLinger(0)
			c.close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// serveConn runs one connection until the client or the server closes it.
func (s *Server) serveConn(c *uaConn) {
	defer s.wg.Done()
	defer close(c.done)
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	defer s.eng.connClosed(c)
	defer c.close()
	// A panic in the protocol stack or a handler ends this connection, not
	// the test binary.
	defer func() {
		if v := recover(); v != nil {
			s.log.Error().Interface("panic", v).Msg("uaserver: connection panicked; closing it")
		}
	}()

	if err := c.handshake(); err != nil {
		s.log.Debug().Err(err).Msg("uaserver: handshake failed")
		return
	}
	var seed [4]byte
	rand.Read(seed[:])
	sc, err := uasc.NewServerSecureChannel(
		s.endpoint, c.ucp, &uasc.Config{
			SecurityPolicyURI: ua.SecurityPolicyURINone,
			SecurityMode:      ua.MessageSecurityModeNone,
			Lifetime:          uint32(time.Hour / time.Millisecond),
		},
		make(chan error, 1),
		s.channelID.Add(1), binary.LittleEndian.Uint32(seed[:])%1023+1, s.tokenID.Add(1),
	)
	if err != nil {
		return
	}
	c.sc = sc
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		msg := sc.Receive(ctx)
		if msg.Err != nil {
			return
		}
		req := msg.Request()
		if req == nil {
			continue // OpenSecureChannel, answered inside Receive
		}
		resp := s.dispatch(c, msg.RequestID, req)
		if resp == nil {
			continue // a Publish, answered later by a subscription
		}
		if err := sc.SendResponseWithContext(ctx, msg.RequestID, resp); err != nil {
			return
		}
	}
}

// handshake answers the client's HEL with an ACK.
func (c *uaConn) handshake() error {
	c.tcp.SetDeadline(time.Now().Add(uaHandshakeTimeout))
	defer c.tcp.SetDeadline(time.Time{})
	ack := &uacp.Acknowledge{
		ReceiveBufSize: uaBufSize,
		SendBufSize:    uaBufSize,
		MaxMessageSize: uaMaxMessage,
		MaxChunkCount:  uaMaxChunks,
	}
	uc, err := uacp.NewConn(c.tcp, ack)
	if err != nil {
		return err
	}
	b, err := uc.Receive()
	if err != nil {
		return err
	}
	if len(b) < 8 || string(b[:4]) != "HELF" {
		uc.SendError(ua.StatusBadTCPMessageTypeInvalid)
		return fmt.Errorf("expected HEL, got %q", b[:min(len(b), 4)])
	}
	hel := new(uacp.Hello)
	if _, err := hel.Decode(b[8:]); err != nil {
		uc.SendError(ua.StatusBadTCPInternalError)
		return err
	}
	// The client accepts chunks up to its receive buffer; gopcua's client
	// actually checks against the ACK's receive buffer, so stay within
	// both.
	limit := uaBufSize
	if r := int(hel.ReceiveBufSize); r >= 8192 && r < limit {
		limit = r
		ack.SendBufSize = hel.ReceiveBufSize
	}
	c.maxBody = limit - uaMsgOverhead
	if err := uc.Send("ACKF", ack); err != nil {
		return err
	}
	c.ucp = uc
	return nil
}

// dispatch answers one request. It returns nil for a request answered
// later (Publish).
func (s *Server) dispatch(c *uaConn, reqID uint32, req ua.Request) (resp ua.Response) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error().Interface("panic", v).Str("request", fmt.Sprintf("%T", req)).Msg("uaserver: handler panicked")
			resp = serviceFault(req, ua.StatusBadInternalError)
		}
	}()
	if req.Header() == nil {
		req.SetHeader(&ua.RequestHeader{AuthenticationToken: ua.NewTwoByteNodeID(0)})
	}
	switch r := req.(type) {
	case *ua.GetEndpointsRequest:
		resp = s.getEndpoints(r)
	case *ua.FindServersRequest:
		resp = s.findServers(r)
	case *ua.CreateSessionRequest:
		resp = s.createSession(c, r)
	case *ua.ActivateSessionRequest:
		resp = s.activateSession(c, r)
	case *ua.CloseSessionRequest:
		resp = s.closeSession(r)
	case *ua.CancelRequest:
		resp = s.cancel(r)
	case *ua.ReadRequest:
		resp = s.readService(c, r)
	case *ua.WriteRequest:
		resp = s.writeService(c, r)
	case *ua.BrowseRequest:
		resp = s.browseService(c, r)
	case *ua.BrowseNextRequest:
		resp = s.browseNext(c, r)
	case *ua.TranslateBrowsePathsToNodeIDsRequest:
		resp = s.translateService(c, r)
	case *ua.RegisterNodesRequest:
		resp = s.registerNodes(r)
	case *ua.UnregisterNodesRequest:
		resp = s.unregisterNodes(r)
	case *ua.CallRequest:
		resp = s.callService(c, r)
	case *ua.HistoryReadRequest:
		resp = s.historyRead(c, r)
	case *ua.CreateSubscriptionRequest:
		resp = s.eng.createSubscription(r)
	case *ua.ModifySubscriptionRequest:
		resp = s.eng.modifySubscription(r)
	case *ua.SetPublishingModeRequest:
		resp = s.eng.setPublishingMode(c, r)
	case *ua.PublishRequest:
		resp = s.eng.publish(c, reqID, r)
	case *ua.RepublishRequest:
		resp = s.eng.republish(r)
	case *ua.TransferSubscriptionsRequest:
		resp = s.eng.transferSubscriptions(c, r)
	case *ua.DeleteSubscriptionsRequest:
		resp = s.eng.deleteSubscriptions(c, r)
	case *ua.CreateMonitoredItemsRequest:
		resp = s.eng.createMonitoredItems(c, r)
	case *ua.ModifyMonitoredItemsRequest:
		resp = s.eng.modifyMonitoredItems(c, r)
	case *ua.SetMonitoringModeRequest:
		resp = s.eng.setMonitoringMode(c, r)
	case *ua.SetTriggeringRequest:
		resp = s.eng.setTriggering(c, r)
	case *ua.DeleteMonitoredItemsRequest:
		resp = s.eng.deleteMonitoredItems(c, r)
	default:
		resp = serviceFault(req, ua.StatusBadServiceUnsupported)
	}
	if resp == nil {
		return nil
	}
	// gopcua's server sends responses of any size in one chunk and the
	// client drops the connection on a chunk larger than its buffer. Answer
	// Bad_ResponseTooLarge instead, as the standard asks. Services with
	// side effects check their operation count before acting (see
	// tooManyOps), so this only ever rejects a read-only answer.
	if n := encodedSize(resp); n > c.maxBody {
		s.log.Warn().Int("bytes", n).Int("limit", c.maxBody).Str("response", fmt.Sprintf("%T", resp)).
			Msg("uaserver: response too large for one chunk")
		resp = serviceFault(req, ua.StatusBadResponseTooLarge)
	}
	return resp
}

// encodedSize is the size of a response's binary encoding, or a size over
// any limit if it does not encode.
func encodedSize(resp ua.Response) int {
	b, err := ua.Encode(resp)
	if err != nil {
		return 1 << 30
	}
	return len(b)
}

// respHeader is a response header for req with the given result.
func respHeader(req ua.Request, code ua.StatusCode) *ua.ResponseHeader {
	var handle uint32
	if req != nil && req.Header() != nil {
		handle = req.Header().RequestHandle
	}
	return &ua.ResponseHeader{
		Timestamp:          time.Now(),
		RequestHandle:      handle,
		ServiceResult:      code,
		ServiceDiagnostics: &ua.DiagnosticInfo{},
		StringTable:        []string{},
		AdditionalHeader:   ua.NewExtensionObject(nil),
	}
}

// serviceFault answers req with a service-level error. gopcua's client
// treats any service-level error as a broken channel and reconnects, so
// handlers use it only where the standard requires one and report
// per-operation results otherwise.
func serviceFault(req ua.Request, code ua.StatusCode) ua.Response {
	return &ua.ServiceFault{ResponseHeader: respHeader(req, code)}
}

// tooManyOps reports whether a request with n operations, each answered
// with about perResult bytes, would get an answer too large for one chunk.
// Services with side effects check this before acting.
func (c *uaConn) tooManyOps(n, perResult int) bool {
	return n*perResult+256 > c.maxBody
}
