package mxgateway

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
)

// CapBulkSubscribeSupervisory is the capability of a gateway whose
// SubscribeBulk honours supervisory=true: it adds and advises supervisory
// in one command.
const CapBulkSubscribeSupervisory = "bulk-subscribe-supervisory"

// CapEventResume is the capability of a gateway that keeps a session
// whose event stream broke and resumes a new stream after the last event
// the client received (EventsAfter).
const CapEventResume = "event-resume"

// CapPing is the capability of a gateway that runs PingCommand: an empty
// command whose round trip proves the session's worker alive. PingCommand
// is apbridge's, not the gateway's published contract: Ping is sent only
// to a gateway that advertises it.
const CapPing = "ping-command"

// CapHeartbeat is the capability of a gateway that sends Heartbeat events
// on an idle stream, every heartbeat_interval of its open reply. Both are
// apbridge's: without the capability the interval is not trusted (the
// field may mean something else to the gateway, or nothing) and
// HeartbeatInterval is zero.
const CapHeartbeat = "stream-heartbeats"

// DefaultGatewayCommandTimeout is the command timeout a gateway grants
// when the session asks for none.
const DefaultGatewayCommandTimeout = 30 * time.Second

// replyMargin is how much longer than the session's command timeout a
// call waits for the gateway's own deadline reply before it gives up on a
// lost one.
const replyMargin = 5 * time.Second

// Session is a session on a gateway. Its commands are safe for concurrent
// use; the gateway runs them one at a time.
type Session struct {
	c         *Client
	id        string
	gateway   string
	writeUser int32
	caps      map[string]bool
	capList   []string
	timeout   time.Duration
	heartbeat time.Duration
	version   int32
	server    atomic.Int32 // the Register handle
	seq       atomic.Uint64
	closed    atomic.Bool
}

// ID returns the gateway's session id.
func (s *Session) ID() string { return s.id }

// Gateway names the gateway: its own id, or its address.
func (s *Session) Gateway() string { return s.gateway }

// Capabilities returns what the gateway advertised at open.
func (s *Session) Capabilities() []string { return append([]string(nil), s.capList...) }

// Has reports whether the gateway advertised capability c.
func (s *Session) Has(c string) bool { return s.caps[c] }

// CommandTimeout returns the command timeout the gateway granted (its
// echo of the request, or its default; DefaultGatewayCommandTimeout when it
// did not say).
func (s *Session) CommandTimeout() time.Duration {
	if s.timeout <= 0 {
		return DefaultGatewayCommandTimeout
	}
	return s.timeout
}

// HeartbeatInterval returns how often the gateway sends a heartbeat on an
// idle event stream; zero if it sends none, or does not advertise
// CapHeartbeat.
func (s *Session) HeartbeatInterval() time.Duration {
	if !s.Has(CapHeartbeat) {
		return 0
	}
	return s.heartbeat
}

// ProtocolVersion returns the gateway's protocol version.
func (s *Session) ProtocolVersion() int32 { return s.version }

// Supervisory reports whether the session was opened supervisory (write
// user 0).
func (s *Session) Supervisory() bool { return s.writeUser == 0 }

// WriteUserID returns the user the session writes as.
func (s *Session) WriteUserID() int32 { return s.writeUser }

// invoke runs one command. Without a deadline on ctx it waits the
// session's command timeout and a margin: the gateway answers by then, or
// the reply was lost.
func (s *Session) invoke(ctx context.Context, op string, cmd *mxpb.MxCommand) (*mxpb.MxCommandReply, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.CommandTimeout()+replyMargin)
		defer cancel()
	}
	corr := strconv.FormatUint(s.seq.Add(1), 10)
	rep, err := s.c.api.Invoke(ctx, &mxpb.MxCommandRequest{SessionId: s.id, ClientCorrelationId: corr, Command: cmd})
	if err != nil {
		return nil, rpcErr(ctx, op, err)
	}
	if c := rep.GetClientCorrelationId(); c != "" && c != corr {
		return nil, fmt.Errorf("mxgateway: %s: reply to request %s answers request %s", op, corr, c)
	}
	if err := statusErr(rep.GetStatus(), ""); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return rep, nil
}

// Register registers the client on the session's worker; the commands
// below use the server handle it returns.
func (s *Session) Register(ctx context.Context, clientName string) error {
	rep, err := s.invoke(ctx, "register", &mxpb.MxCommand{Command: &mxpb.MxCommand_Register{
		Register: &mxpb.RegisterCommand{ClientName: clientName}}})
	if err != nil {
		return err
	}
	s.server.Store(rep.GetRegister().GetServerHandle())
	return nil
}

// ItemResult is the outcome of one item of a bulk command: its handle, or
// Err (a *StatusError naming the item).
type ItemResult struct {
	Address string
	Handle  int32
	Err     error
}

func (s *Session) items(rep *mxpb.MxCommandReply, n int, name func(i int) string) ([]ItemResult, error) {
	res := rep.GetItems().GetResults()
	if len(res) != n {
		return nil, fmt.Errorf("mxgateway: the gateway answered %d results for %d items", len(res), n)
	}
	out := make([]ItemResult, n)
	for i, r := range res {
		item := name(i)
		out[i] = ItemResult{Address: r.GetTagAddress(), Handle: r.GetItemHandle(), Err: statusErr(r.GetStatus(), item)}
		if out[i].Address == "" {
			out[i].Address = item
		}
	}
	return out, nil
}

// AddItems adds the addresses (Object.Attribute) without advising them.
func (s *Session) AddItems(ctx context.Context, addrs []string) ([]ItemResult, error) {
	rep, err := s.invoke(ctx, "add items", &mxpb.MxCommand{Command: &mxpb.MxCommand_AddItemBulk{
		AddItemBulk: &mxpb.AddItemBulkCommand{ServerHandle: s.server.Load(), TagAddresses: addrs}}})
	if err != nil {
		return nil, err
	}
	return s.items(rep, len(addrs), func(i int) string { return addrs[i] })
}

// SubscribeBulk adds and advises the addresses in one command; supervisory
// advises them supervisory, which only a gateway with
// CapBulkSubscribeSupervisory does: SubscribeBulk returns ErrNoCapability
// rather than send it to one without.
func (s *Session) SubscribeBulk(ctx context.Context, addrs []string, supervisory bool) ([]ItemResult, error) {
	if supervisory && !s.Has(CapBulkSubscribeSupervisory) {
		return nil, fmt.Errorf("%w %q: a supervisory bulk subscribe would be advised plainly", ErrNoCapability, CapBulkSubscribeSupervisory)
	}
	rep, err := s.invoke(ctx, "subscribe bulk", &mxpb.MxCommand{Command: &mxpb.MxCommand_SubscribeBulk{
		SubscribeBulk: &mxpb.SubscribeBulkCommand{ServerHandle: s.server.Load(), TagAddresses: addrs, Supervisory: supervisory}}})
	if err != nil {
		return nil, err
	}
	return s.items(rep, len(addrs), func(i int) string { return addrs[i] })
}

// AdviseSupervisory advises one added item supervisory.
func (s *Session) AdviseSupervisory(ctx context.Context, handle int32) error {
	_, err := s.invoke(ctx, "advise supervisory", &mxpb.MxCommand{Command: &mxpb.MxCommand_AdviseSupervisory{
		AdviseSupervisory: &mxpb.AdviseSupervisoryCommand{ServerHandle: s.server.Load(), ItemHandle: handle}}})
	return err
}

// Advise advises one added item plainly.
func (s *Session) Advise(ctx context.Context, handle int32) error {
	_, err := s.invoke(ctx, "advise", &mxpb.MxCommand{Command: &mxpb.MxCommand_Advise{
		Advise: &mxpb.AdviseCommand{ServerHandle: s.server.Load(), ItemHandle: handle}}})
	return err
}

// AdviseBulk advises added items plainly in one command.
func (s *Session) AdviseBulk(ctx context.Context, handles []int32) ([]ItemResult, error) {
	rep, err := s.invoke(ctx, "advise bulk", &mxpb.MxCommand{Command: &mxpb.MxCommand_AdviseItemBulk{
		AdviseItemBulk: &mxpb.AdviseItemBulkCommand{ServerHandle: s.server.Load(), ItemHandles: handles}}})
	if err != nil {
		return nil, err
	}
	return s.items(rep, len(handles), func(i int) string { return "item " + strconv.Itoa(int(handles[i])) })
}

// UnAdvise stops an item's data changes.
func (s *Session) UnAdvise(ctx context.Context, handle int32) error {
	_, err := s.invoke(ctx, "unadvise", &mxpb.MxCommand{Command: &mxpb.MxCommand_UnAdvise{
		UnAdvise: &mxpb.UnAdviseCommand{ServerHandle: s.server.Load(), ItemHandle: handle}}})
	return err
}

// RemoveItem removes an item.
func (s *Session) RemoveItem(ctx context.Context, handle int32) error {
	_, err := s.invoke(ctx, "remove item", &mxpb.MxCommand{Command: &mxpb.MxCommand_RemoveItem{
		RemoveItem: &mxpb.RemoveItemCommand{ServerHandle: s.server.Load(), ItemHandle: handle}}})
	return err
}

// Write writes v to an advised item as the session's write user. The
// error is a *StatusError when the gateway refused the write.
func (s *Session) Write(ctx context.Context, handle int32, v any) error {
	mv, err := ToValue(v)
	if err != nil {
		return err
	}
	rep, err := s.invoke(ctx, "write", &mxpb.MxCommand{Command: &mxpb.MxCommand_Write{
		Write: &mxpb.WriteCommand{ServerHandle: s.server.Load(), ItemHandle: handle, Value: mv, UserId: s.writeUser}}})
	if err != nil {
		return err
	}
	return statusErr(rep.GetWrite().GetStatus(), "item "+strconv.Itoa(int(handle)))
}

// ItemValue is an item's value as Read returns it.
type ItemValue struct {
	Handle    int32
	Value     any
	Quality   int32
	Timestamp time.Time
}

// Read reads the current values of added items.
func (s *Session) Read(ctx context.Context, handles []int32) ([]ItemValue, error) {
	rep, err := s.invoke(ctx, "read", &mxpb.MxCommand{Command: &mxpb.MxCommand_Read{
		Read: &mxpb.ReadCommand{ServerHandle: s.server.Load(), ItemHandles: handles}}})
	if err != nil {
		return nil, err
	}
	var out []ItemValue
	for _, v := range rep.GetRead().GetValues() {
		out = append(out, ItemValue{Handle: v.GetItemHandle(), Value: FromValue(v.GetValue()),
			Quality: v.GetQuality(), Timestamp: asTime(v.GetTimestamp())})
	}
	return out, nil
}

// Ping runs an empty command: its round trip proves the session's command
// path, worker included, is alive. It returns ErrNoCapability, without
// sending anything, to a gateway that does not advertise CapPing.
func (s *Session) Ping(ctx context.Context) error {
	if !s.Has(CapPing) {
		return fmt.Errorf("%w %q", ErrNoCapability, CapPing)
	}
	_, err := s.invoke(ctx, "ping", &mxpb.MxCommand{Command: &mxpb.MxCommand_Ping{Ping: &mxpb.PingCommand{}}})
	return err
}

// Close ends the session on the gateway. It is idempotent; the channel
// stays open.
func (s *Session) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	_, err := s.c.api.CloseSession(ctx, &mxpb.CloseSessionRequest{SessionId: s.id})
	return rpcErr(ctx, "close session", err)
}
