// Package ports hands out loopback ports that a test server can bind
// again after it was killed: the NATS nodes' ports, the OPC UA endpoints
// and the MxAccess gateways' port. See Blocks.
package ports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Listeners that must come back on the same port after a kill (NATS client
// and cluster ports, the OPC UA servers' endpoints, an MxAccess gateway's
// port) get ports from a Blocks that the cluster, pair or gateway owns for
// its lifetime.
//
// Two ways to lose such a port were seen in CI:
//   - A port from the kernel's ephemeral range, freed by a kill, can become
//     the source port of any outgoing connection on the machine and stays
//     taken as long as that connection lives. So ports come from below the
//     ephemeral range, where only explicit binds land.
//   - A port picked at random and released until the server binds it (or
//     while its node is dead) can be picked by another cluster, in this
//     process or in another test binary running beside it. So each cluster
//     takes whole blocks of ports, locked with flock on a file per block
//     under the temp directory: no other cluster picks from a locked block,
//     and the lock goes when the cluster is closed or its process exits.
const (
	stablePortFloor = 10000
	portBlockSize   = 16
)

// StableRange returns the half-open range [lo, hi) that Blocks draws its
// ports from, or ok false when the ephemeral range leaves no room below it
// (then port 0 is the best there is).
func StableRange() (lo, hi int, ok bool) {
	hi = 49152 // IANA's dynamic range: the default on macOS and Windows
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = v
			}
		}
	}
	if hi-stablePortFloor < 64*portBlockSize {
		return 0, 0, false
	}
	return stablePortFloor, hi, true
}

// Blocks hands out the ports of the blocks it holds, each once. The zero
// value holds none and takes a block when it needs one.
type Blocks struct {
	mu    sync.Mutex
	locks []*os.File // one per block held; nil entries where locking is unsupported
	free  []int      // ports of held blocks not handed out yet
}

// Listen listens on loopback on a port of the blocks, taking another block
// when those run out. A port some unrelated program has bound is skipped.
func (b *Blocks) Listen() (net.Listener, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var lastErr error
	for range 8 * portBlockSize {
		if len(b.free) == 0 {
			// The range is read only when a block is needed.
			lo, hi, ok := StableRange()
			if !ok {
				return net.Listen("tcp", "127.0.0.1:0")
			}
			if err := b.takeBlockLocked(lo, hi); err != nil {
				return nil, err
			}
		}
		port := b.free[0]
		b.free = b.free[1:]
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			return l, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("ports: no free port in %d blocks of %d: %w", len(b.locks), portBlockSize, lastErr)
}

// Port returns a port of the blocks that is free right now, for a server
// that binds it itself.
func (b *Blocks) Port() (int, error) {
	l, err := b.Listen()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (b *Blocks) takeBlockLocked(lo, hi int) error {
	dir := filepath.Join(os.TempDir(), "apbridge-testcluster-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("ports: port locks: %w", err)
	}
	n := (hi - lo) / portBlockSize
	var lastErr error
	for range 256 {
		start := lo + rand.IntN(n)*portBlockSize
		f, err := lockPortBlock(filepath.Join(dir, strconv.Itoa(start)))
		if err != nil {
			lastErr = err
			continue
		}
		b.locks = append(b.locks, f)
		for p := start; p < start+portBlockSize; p++ {
			b.free = append(b.free, p)
		}
		return nil
	}
	return fmt.Errorf("ports: no unlocked block of %d ports in %d-%d: %w", portBlockSize, lo, hi-1, lastErr)
}

// Release gives the blocks back. The ports must no longer be in use.
func (b *Blocks) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range b.locks {
		if f != nil {
			f.Close() // closing the file drops its lock
		}
	}
	b.locks, b.free = nil, nil
}

// errBlockLocked says another cluster holds the block.
var errBlockLocked = errors.New("port block held by another cluster")

// Free reports the ports that cannot be bound on loopback right now, with
// the reason.
func Free(ports ...int) error {
	var errs []error
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.Close()
	}
	return errors.Join(errs...)
}
