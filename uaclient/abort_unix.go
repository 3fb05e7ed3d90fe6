//go:build unix

package uaclient

import "syscall"

// abortConn shuts a socket down in both directions, which ends a read
// blocked on it. Through the RawConn, so that a socket already closed (its
// descriptor maybe reused) is left alone.
func abortConn(rc syscall.RawConn) {
	rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
}
