package uaclient

import (
	"errors"
	"slices"
	"syscall"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua/ua"
)

// refusedError marks a connect error that is a matter of trust or
// configuration (the server's certificate, its security offer, the login),
// not of the link: it is logged as an error and retried no sooner than the
// reconnect delay.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }

func (e *refusedError) Unwrap() error { return e.err }

// refusalCodes are the status codes with which a server refuses a client's
// certificate or login.
var refusalCodes = []ua.StatusCode{
	ua.StatusBadUserAccessDenied, ua.StatusBadIdentityTokenInvalid, ua.StatusBadIdentityTokenRejected,
	ua.StatusBadCertificateUntrusted, ua.StatusBadCertificateInvalid, ua.StatusBadSecurityChecksFailed,
	ua.StatusBadCertificateRevoked, ua.StatusBadCertificateUseNotAllowed, ua.StatusBadSecurityPolicyRejected,
	ua.StatusBadCertificateURIInvalid, ua.StatusBadCertificateHostNameInvalid, ua.StatusBadCertificateTimeInvalid,
}

// isRefusal reports whether err says the server (or the client's own
// security settings) refused the connection, as opposed to a link fault.
func isRefusal(err error) bool {
	var re *refusedError
	if errors.As(err, &re) {
		return true
	}
	var sc ua.StatusCode
	return errors.As(err, &sc) && slices.Contains(refusalCodes, sc)
}

// wsaECONNREFUSED is Windows' "connection refused": its sockets report
// their own error numbers, which syscall.ECONNREFUSED does not match there.
const wsaECONNREFUSED = syscall.Errno(10061)

// portClosed reports whether a connect error is the server host answering
// the dial with a reset: nothing listens on the port, so the server
// process is gone, and that is no blip to wait out. A timeout, or a server
// that refuses the session (isRefusal), is not this.
func portClosed(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	return errno == syscall.ECONNREFUSED || errno == wsaECONNREFUSED
}

// Errors of the Pair. Use errors.Is: the returned errors wrap them with
// details.
var (
	// ErrClosed: the Pair was closed.
	ErrClosed = errors.New("uaclient: pair closed")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("uaclient: pair already started")
	// ErrNotStarted: the call needs a started Pair.
	ErrNotStarted = errors.New("uaclient: pair not started")
	// ErrUnknownHandle: no item has the handle.
	ErrUnknownHandle = errors.New("uaclient: unknown item handle")
	// ErrWriteRefused: the write was not sent (see WriteRefusedError). It
	// is always one of the two below as well.
	ErrWriteRefused = errors.New("uaclient: write refused")
	// ErrNoSession: the write was refused because no session carries the
	// data right now (before the first connect, between sessions, during a
	// switch).
	ErrNoSession = errors.New("uaclient: no active session")
	// ErrNotHealthy: the write was refused because the active server's
	// current ServiceLevel is not Healthy (below 200, or unreadable).
	ErrNotHealthy = errors.New("uaclient: active server not Healthy")
)

// WriteRefusedError is returned by Write when the active endpoint is not
// known to be Healthy: a write goes only to a server whose current
// ServiceLevel is 200 or more, never to a standby, a degraded server or
// one in maintenance, and never during a switch. errors.Is(err,
// ErrWriteRefused) reports it, and errors.Is with ErrNoSession or
// ErrNotHealthy tells the two cases apart.
type WriteRefusedError struct {
	Endpoint servicelevel.Endpoint // the active endpoint
	Level    servicelevel.Level    // its current level
	// Err is ErrNoSession or ErrNotHealthy.
	Err    error
	Reason string // the refusal in words
}

// Error renders "uaclient: write refused: <reason>".
func (e *WriteRefusedError) Error() string {
	return "uaclient: write refused: " + e.Reason
}

// Is makes errors.Is(err, ErrWriteRefused) true.
func (e *WriteRefusedError) Is(target error) bool { return target == ErrWriteRefused }

// Unwrap returns Err.
func (e *WriteRefusedError) Unwrap() error { return e.Err }

// errSessionGone says that the server no longer has the session.
var errSessionGone = errors.New("the server no longer has the session")

// sessionGone reports whether err is a server's answer that the session
// does not exist (any more): closed, timed out, or never known.
func sessionGone(err error) bool {
	for _, code := range []ua.StatusCode{ua.StatusBadSessionIDInvalid, ua.StatusBadSessionClosed, ua.StatusBadSessionNotActivated} {
		if errors.Is(err, code) {
			return true
		}
	}
	return false
}
