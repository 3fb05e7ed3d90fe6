package apconn

import (
	"errors"
	"fmt"
)

var (
	// ErrPublishBufferFull is returned by Publish when publishes are held
	// (a switch is cutting over, or no broker is usable) and the replay
	// buffer is full. The message was not accepted.
	ErrPublishBufferFull = errors.New("apconn: publish buffer full while no broker is usable")
	// ErrNoPassive is returned by SwitchToPassive when there is no passive
	// ready to take over.
	ErrNoPassive = errors.New("apconn: no passive ready to take over")
	// ErrClosed is returned by calls on a closed Conn.
	ErrClosed = errors.New("apconn: connection closed")
	// ErrNoServers is returned by Connect when no server could be reached.
	ErrNoServers = errors.New("apconn: no server could be reached")
)

// URLError reports a server URL that cannot be used.
type URLError struct {
	URL    string
	Reason string
}

func (e *URLError) Error() string {
	return fmt.Sprintf("apconn: server URL %q: %s", e.URL, e.Reason)
}
