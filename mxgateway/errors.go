package mxgateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	// ErrSessionEnded reports that the gateway ended the session's event
	// stream in order: the session is gone, the gateway may well be up.
	ErrSessionEnded = errors.New("mxgateway: the gateway ended the session")
	// ErrDisconnected reports a broken transport or an unreachable
	// gateway.
	ErrDisconnected = errors.New("mxgateway: disconnected from the gateway")
	// ErrSessionLost reports a command on a session the gateway no longer
	// knows (it restarted, or faulted the session).
	ErrSessionLost = errors.New("mxgateway: the gateway does not know the session")
	// ErrCommandTimeout reports a command that outlived the session's
	// command timeout on the gateway.
	ErrCommandTimeout = errors.New("mxgateway: command timed out on the gateway")
	// ErrBusy reports a session whose command queue is full.
	ErrBusy = errors.New("mxgateway: the session's command queue is full")
	// ErrNoCapability reports a request the gateway did not advertise.
	ErrNoCapability = errors.New("mxgateway: the gateway lacks the capability")
	// ErrCannotResume reports a stream that could not resume where it
	// broke: the gateway no longer holds the events after it (or does not
	// resume streams); they are lost.
	ErrCannotResume = errors.New("mxgateway: the gateway cannot resume the event stream")
	// ErrClosed reports use of a closed Session or Client.
	ErrClosed = errors.New("mxgateway: closed")
)

// StatusError is a non-OK MxStatus: of a command, of one item of a bulk
// command, or of a write.
type StatusError struct {
	Code    mxpb.MxStatusCode
	Message string
	// Item is the tag address or handle it concerns, if any.
	Item string
}

func (e *StatusError) Error() string {
	code := strings.ToLower(strings.TrimPrefix(e.Code.String(), "MX_STATUS_CODE_"))
	var b strings.Builder
	b.WriteString("mxgateway: ")
	if e.Item != "" {
		b.WriteString(e.Item + ": ")
	}
	b.WriteString(strings.ReplaceAll(code, "_", " "))
	if e.Message != "" {
		b.WriteString(" (" + e.Message + ")")
	}
	return b.String()
}

// statusErr turns an MxStatus into an error, nil for OK.
func statusErr(s *mxpb.MxStatus, item string) error {
	if s == nil || s.GetCode() == mxpb.MxStatusCode_MX_STATUS_CODE_OK {
		return nil
	}
	return &StatusError{Code: s.GetCode(), Message: s.GetMessage(), Item: item}
}

// FaultError reports a session the gateway faulted, e.g. for an event
// queue overflow: the session is gone and its data changes since the last
// event are lost.
type FaultError struct {
	Kind    mxpb.SessionFaultKind
	Message string
}

func (e *FaultError) Error() string {
	kind := strings.ToLower(strings.TrimPrefix(e.Kind.String(), "SESSION_FAULT_KIND_"))
	return fmt.Sprintf("mxgateway: session faulted: %s (%s)", strings.ReplaceAll(kind, "_", " "), e.Message)
}

// Overflow reports whether the gateway faulted the session because its
// event queue overflowed.
func (e *FaultError) Overflow() bool {
	return e.Kind == mxpb.SessionFaultKind_SESSION_FAULT_KIND_EVENT_QUEUE_OVERFLOW
}

// rpcErr classifies a gRPC error of a unary call as one of the package's
// errors, keeping the original for its message.
func rpcErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("mxgateway: %s: %w", op, ctx.Err())
	}
	st, _ := status.FromError(err)
	if notGateway(st) {
		return fmt.Errorf("mxgateway: %s: the endpoint does not speak the MxAccess gateway protocol: %w", op, err)
	}
	var kind error
	switch st.Code() {
	case codes.DeadlineExceeded:
		kind = ErrCommandTimeout
	case codes.NotFound:
		kind = ErrSessionLost
	case codes.ResourceExhausted:
		kind = ErrBusy
	case codes.Unavailable, codes.Canceled:
		kind = ErrDisconnected
	}
	if kind == nil {
		return fmt.Errorf("mxgateway: %s: %w", op, err)
	}
	return fmt.Errorf("%w: %s: %s", kind, op, st.Message())
}

// streamErr classifies the end of an event stream; fault is the
// SessionFault event the gateway sent before it, if any.
func streamErr(ctx context.Context, err error, fault *FaultError) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if fault != nil {
		return fault
	}
	if errors.Is(err, io.EOF) {
		return ErrSessionEnded
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.OK:
		return ErrSessionEnded
	case codes.NotFound:
		return fmt.Errorf("%w: %s", ErrSessionLost, st.Message())
	case codes.ResourceExhausted:
		return &FaultError{Kind: mxpb.SessionFaultKind_SESSION_FAULT_KIND_EVENT_QUEUE_OVERFLOW, Message: st.Message()}
	case codes.OutOfRange:
		return fmt.Errorf("%w: %s", ErrCannotResume, st.Message())
	}
	return fmt.Errorf("%w: %v", ErrDisconnected, err)
}

// notGateway reports an answer from something that is not an MxAccess
// gateway: an HTTP/1 server on the port (no HTTP/2 preface, an HTML
// content type) or another gRPC service (the method is unknown).
func notGateway(st *status.Status) bool {
	if st.Code() == codes.Unimplemented {
		return true
	}
	msg := st.Message()
	for _, sign := range []string{"server preface", "http2: frame too large", "malformed header", "content-type", "HTTP/1"} {
		if strings.Contains(msg, sign) {
			return true
		}
	}
	return false
}
