//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package ports

import (
	"errors"
	"os"
	"syscall"
)

// lockPortBlock takes an exclusive, non-blocking flock on path. flock locks
// belong to the open file, so two clusters in one process exclude each
// other as two processes do, and a crashed process leaves no lock behind.
func lockPortBlock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errBlockLocked
		}
		return nil, err
	}
	return f, nil
}
