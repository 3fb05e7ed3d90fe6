package mxgateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Client is a gRPC channel to one gateway. It is safe for concurrent use;
// sessions opened on it share the channel.
type Client struct {
	target string
	conn   *grpc.ClientConn
	api    mxpb.MxAccessGatewayClient
	log    zerolog.Logger
}

// Option configures a Client.
type Option func(*options) error

type options struct {
	tls       *tls.Config
	token     string
	log       zerolog.Logger
	keepalive time.Duration
	dial      []grpc.DialOption
}

// WithTLS secures the channel with c (default: plaintext, for a gateway on
// a trusted network).
func WithTLS(c *tls.Config) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("WithTLS: nil config")
		}
		o.tls = c
		return nil
	}
}

// WithToken sends token as a bearer token ("authorization" metadata) on
// every call. Over a plaintext channel it is refused: it would travel in
// the clear.
func WithToken(token string) Option {
	return func(o *options) error { o.token = token; return nil }
}

// WithLogger logs through l (default: no logging).
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// WithKeepalive pings the gateway's transport after d without traffic, so
// that a dead peer is found even on an idle channel (default 10 s; 0 turns
// it off).
func WithKeepalive(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("WithKeepalive: %v is negative", d)
		}
		o.keepalive = d
		return nil
	}
}

// WithDialOptions passes options to grpc.NewClient.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) error { o.dial = append(o.dial, opts...); return nil }
}

// NewClient returns a client of the gateway at target (host:port). It does
// not connect: the first call does, and fails if the gateway is not there.
func NewClient(target string, opts ...Option) (*Client, error) {
	o := options{log: zerolog.Nop(), keepalive: 10 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("mxgateway: %w", err)
		}
	}
	if target == "" {
		return nil, errors.New("mxgateway: empty target")
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// gRPC's own reconnect backoff grows to 2 minutes by default: a
		// gateway back from a restart would wait that long for the
		// channel. Gateways are few and a TCP connect is cheap.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectCeiling},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if o.token != "" {
		if o.tls == nil {
			return nil, errors.New("mxgateway: a token needs TLS (WithTLS): it would travel in the clear")
		}
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(o.token)))
	}
	if o.keepalive > 0 {
		dial = append(dial, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: o.keepalive, Timeout: o.keepalive, PermitWithoutStream: true}))
	}
	conn, err := grpc.NewClient("passthrough:///"+target, append(dial, o.dial...)...)
	if err != nil {
		return nil, fmt.Errorf("mxgateway: %s: %w", target, err)
	}
	return &Client{target: target, conn: conn, api: mxpb.NewMxAccessGatewayClient(conn), log: o.log}, nil
}

// reconnectCeiling caps the channel's reconnect backoff: how long after a
// gateway is back at most before the channel sees it.
const reconnectCeiling = 500 * time.Millisecond

// WaitReady waits until the channel is connected to the gateway, or ctx
// ends. It starts a connection attempt if the channel is idle, and one
// every readyPoll while it is failing, rather than after gRPC's backoff:
// a gateway back from a restart is used within readyPoll.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		st := c.conn.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return ErrClosed
		case connectivity.Idle:
			c.conn.Connect()
		}
		wctx, cancel := context.WithTimeout(ctx, readyPoll)
		changed := c.conn.WaitForStateChange(wctx, st)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !changed && st == connectivity.TransientFailure {
			c.conn.ResetConnectBackoff()
		}
	}
}

// staleReady is how long Reconnect watches a channel that still says
// Ready after a break before it believes it.
const staleReady = 50 * time.Millisecond

// readyPoll is how often WaitReady tries a failing gateway again.
const readyPoll = 100 * time.Millisecond

// Reconnect connects the channel again after a broken transport: it
// returns nil once connected, and ErrDisconnected as soon as an attempt
// fails (the gateway is down, not merely blipped), or ctx's error.
func (c *Client) Reconnect(ctx context.Context) error {
	// Right after a break the channel may still say Ready: it has not
	// seen the transport go yet. Ready is believed once it has held for
	// staleReady, or was reached anew.
	if c.conn.GetState() == connectivity.Ready {
		sctx, cancel := context.WithTimeout(ctx, staleReady)
		changed := c.conn.WaitForStateChange(sctx, connectivity.Ready)
		cancel()
		if !changed {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil
		}
	}
	tried := false
	for {
		st := c.conn.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return ErrClosed
		case connectivity.Idle:
			c.conn.Connect()
		case connectivity.Connecting:
			tried = true
		case connectivity.TransientFailure:
			if tried {
				return fmt.Errorf("%w: %s does not accept connections", ErrDisconnected, c.target)
			}
			// A failure from before this call: try again now, not after
			// the backoff.
			c.conn.ResetConnectBackoff()
		}
		if !c.conn.WaitForStateChange(ctx, st) {
			return ctx.Err()
		}
	}
}

// Target returns the gateway's address.
func (c *Client) Target() string { return c.target }

// Close closes the channel; sessions on it end. Closing it again is a
// no-op.
func (c *Client) Close() error {
	if c.conn.GetState() == connectivity.Shutdown {
		return nil
	}
	return c.conn.Close()
}

// SessionOptions are asked for at OpenSession.
type SessionOptions struct {
	// ClientName names the client in the gateway's logs.
	ClientName string
	// WriteUserID is the MXAccess user writes are made as; 0 opens a
	// supervisory session, whose advises must be supervisory.
	WriteUserID int32
	// CommandTimeout is the session's command deadline on the gateway;
	// zero takes the gateway's default.
	CommandTimeout time.Duration
}

// Open opens a session. The gateway may grant another command timeout than
// the one asked for: Session.CommandTimeout says which it granted.
func (c *Client) Open(ctx context.Context, so SessionOptions) (*Session, error) {
	req := &mxpb.OpenSessionRequest{ClientName: so.ClientName, WriteUserId: so.WriteUserID}
	if so.CommandTimeout > 0 {
		req.CommandTimeout = durationpb.New(so.CommandTimeout)
	}
	rep, err := c.api.OpenSession(ctx, req)
	if err != nil {
		return nil, rpcErr(ctx, "open session on "+c.target, err)
	}
	if rep.GetSessionId() == "" {
		return nil, fmt.Errorf("mxgateway: open session on %s: the reply has no session id", c.target)
	}
	s := &Session{
		c: c, id: rep.GetSessionId(), gateway: rep.GetGatewayId(),
		writeUser: so.WriteUserID,
		caps:      map[string]bool{},
		timeout:   rep.GetDefaultCommandTimeout().AsDuration(),
		heartbeat: rep.GetHeartbeatInterval().AsDuration(),
		version:   rep.GetGatewayProtocolVersion(),
	}
	for _, cp := range rep.GetCapabilities() {
		s.caps[cp] = true
		s.capList = append(s.capList, cp)
	}
	if s.gateway == "" {
		s.gateway = c.target
	}
	return s, nil
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }
