//go:build !unix

package uaclient

import "syscall"

// abortConn does nothing here: a handshake on a frozen link ends with the
// connect timeout.
func abortConn(syscall.RawConn) {}
