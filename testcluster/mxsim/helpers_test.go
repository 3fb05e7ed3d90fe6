package mxsim

import (
	"context"
	"testing"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The helpers of the Gateway tests: a gateway that the test's cleanup
// closes, a real gRPC client, and a session harness.

// TestMain fails the run if any goroutine outlives the tests: the
// gateways, sessions and clients started here must all be stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ctx5s is a context that ends after 5 s or with the test.
func ctx5s(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startMx starts n gateways over data that the test's cleanup closes, and
// fails the test if they leave a goroutine behind.
func startMx(t *testing.T, data *Data, n int) []*Gateway {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	gs := make([]*Gateway, n)
	for i := range gs {
		g, err := Start(data)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		gs[i] = g
	}
	return gs
}

// dialMx returns a client of the gateway at addr, closed by the test's
// cleanup. It reconnects within 100 ms, so that a test of Restart need not
// wait for gRPC's default backoff of a second or more.
func dialMx(t *testing.T, addr string, opts ...grpc.DialOption) mxpb.MxAccessGatewayClient {
	t.Helper()
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = 20*time.Millisecond, 100*time.Millisecond
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: time.Second}),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return mxpb.NewMxAccessGatewayClient(conn)
}

// mxSess is a session of a test: its client, ID and server handle.
type mxSess struct {
	t      *testing.T
	c      mxpb.MxAccessGatewayClient
	id     string
	open   *mxpb.OpenSessionReply
	server int32
}

// openMx opens a session that writes as user and registers it. A timeout
// of 0 asks for none.
func openMx(t *testing.T, c mxpb.MxAccessGatewayClient, user int32, timeout time.Duration) *mxSess {
	t.Helper()
	req := &mxpb.OpenSessionRequest{ClientName: t.Name(), WriteUserId: user}
	if timeout != 0 {
		req.CommandTimeout = durationpb.New(timeout)
	}
	rep, err := c.OpenSession(ctx5s(t), req)
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	s := &mxSess{t: t, c: c, id: rep.GetSessionId(), open: rep}
	s.server = s.must(&mxpb.MxCommand{Command: &mxpb.MxCommand_Register{Register: &mxpb.RegisterCommand{ClientName: t.Name()}}}).GetRegister().GetServerHandle()
	if s.server <= 0 {
		t.Fatalf("Register: server handle %d", s.server)
	}
	return s
}

func (s *mxSess) invokeCtx(ctx context.Context, cmd *mxpb.MxCommand) (*mxpb.MxCommandReply, error) {
	return s.c.Invoke(ctx, &mxpb.MxCommandRequest{SessionId: s.id, ClientCorrelationId: "c", Command: cmd})
}

func (s *mxSess) invoke(cmd *mxpb.MxCommand) (*mxpb.MxCommandReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.invokeCtx(ctx, cmd)
}

// must runs cmd and fails the test unless it succeeds with status OK.
func (s *mxSess) must(cmd *mxpb.MxCommand) *mxpb.MxCommandReply {
	s.t.Helper()
	rep, err := s.invoke(cmd)
	if err != nil {
		s.t.Fatalf("%s: %v", mxKind(cmd), err)
	}
	if rep.GetStatus().GetCode() != mxpb.MxStatusCode_MX_STATUS_CODE_OK {
		s.t.Fatalf("%s: %v", mxKind(cmd), rep.GetStatus())
	}
	if rep.GetClientCorrelationId() != "c" {
		s.t.Fatalf("%s: correlation ID %q, want c", mxKind(cmd), rep.GetClientCorrelationId())
	}
	return rep
}

func subscribeCmd(server int32, sup bool, addrs ...string) *mxpb.MxCommand {
	return &mxpb.MxCommand{Command: &mxpb.MxCommand_SubscribeBulk{SubscribeBulk: &mxpb.SubscribeBulkCommand{
		ServerHandle: server, TagAddresses: addrs, Supervisory: sup}}}
}

func writeCmd(server, item int32, v any, user int32) *mxpb.MxCommand {
	var mv *mxpb.MxValue
	if v != nil {
		mv = toMxValue(v)
	}
	return &mxpb.MxCommand{Command: &mxpb.MxCommand_Write{Write: &mxpb.WriteCommand{
		ServerHandle: server, ItemHandle: item, Value: mv, UserId: user}}}
}

func pingCmd() *mxpb.MxCommand {
	return &mxpb.MxCommand{Command: &mxpb.MxCommand_Ping{Ping: &mxpb.PingCommand{}}}
}

// subscribe subscribes addrs and returns the results, failing the test on
// an error of the command itself.
func (s *mxSess) subscribe(sup bool, addrs ...string) []*mxpb.ItemResult {
	s.t.Helper()
	return s.must(subscribeCmd(s.server, sup, addrs...)).GetItems().GetResults()
}

// handle subscribes one address and returns its item handle.
func (s *mxSess) handle(sup bool, addr string) int32 {
	s.t.Helper()
	r := s.subscribe(sup, addr)
	if len(r) != 1 || r[0].GetStatus().GetCode() != mxpb.MxStatusCode_MX_STATUS_CODE_OK || r[0].GetItemHandle() <= 0 {
		s.t.Fatalf("subscribe %s: %v", addr, r)
	}
	return r[0].GetItemHandle()
}

// write writes v to item as user and returns the write's status.
func (s *mxSess) write(item int32, v any, user int32) mxpb.MxStatusCode {
	s.t.Helper()
	return s.must(writeCmd(s.server, item, v, user)).GetWrite().GetStatus().GetCode()
}

// mxEvents reads a session's event stream on a goroutine of its own,
// stopped by the test's cleanup.
type mxEvents struct {
	ch     chan *mxpb.MxEvent
	done   chan struct{}
	err    error // the stream's end, set before done closes
	cancel context.CancelFunc
}

func (s *mxSess) events() *mxEvents {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := s.c.StreamEvents(ctx, &mxpb.StreamEventsRequest{SessionId: s.id})
	if err != nil {
		cancel()
		s.t.Fatalf("StreamEvents: %v", err)
	}
	e := &mxEvents{ch: make(chan *mxpb.MxEvent, 1024), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(e.done)
		for {
			ev, err := st.Recv()
			if err != nil {
				e.err = err
				return
			}
			select {
			case e.ch <- ev:
			case <-ctx.Done():
				e.err = ctx.Err()
				return
			}
		}
	}()
	s.t.Cleanup(func() { cancel(); <-e.done })
	return e
}

// next returns the next event, failing the test after timeout or at the
// end of the stream.
func (e *mxEvents) next(t *testing.T, timeout time.Duration) *mxpb.MxEvent {
	t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case <-time.After(timeout):
		t.Fatalf("no event within %v", timeout)
	case <-e.done:
		select {
		case ev := <-e.ch:
			return ev
		default:
		}
		t.Fatalf("stream ended: %v", e.err)
	}
	return nil
}

// end waits for the end of the stream and returns the events still
// delivered and the stream's error.
func (e *mxEvents) end(t *testing.T, timeout time.Duration) ([]*mxpb.MxEvent, error) {
	t.Helper()
	select {
	case <-e.done:
	case <-time.After(timeout):
		t.Fatalf("the stream did not end within %v", timeout)
	}
	var evs []*mxpb.MxEvent
	for {
		select {
		case ev := <-e.ch:
			evs = append(evs, ev)
		default:
			return evs, e.err
		}
	}
}

// waitMx polls cond until it holds, failing the test after timeout.
func waitMx(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if status.Code(err) != want {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}
