package ports

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Each cluster and pair owns whole blocks of ports, locked across
// processes and within one: no other cluster picks a port of a held block,
// even while the node on it is dead, and Close gives the block back.
func TestPortBlocksAreExclusive(t *testing.T) {
	lo, _, ok := StableRange()
	if !ok {
		t.Skip("the ephemeral range leaves no room below it")
	}
	var a Blocks
	l, err := a.Listen()
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	start := port - (port-lo)%portBlockSize
	path := filepath.Join(os.TempDir(), "apbridge-testcluster-ports", strconv.Itoa(start))
	f, err := lockPortBlock(path)
	if f == nil && err == nil {
		t.Skip("no flock here")
	}
	if !errors.Is(err, errBlockLocked) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("a second lock on a held block: %v", err)
	}
	// The rest of the block goes to a's later ports.
	next, err := a.Port()
	if err != nil {
		t.Fatal(err)
	}
	if next < start || next >= start+portBlockSize {
		t.Fatalf("second port %d outside a's block %d-%d", next, start, start+portBlockSize-1)
	}
	a.Release()
	if f, err = lockPortBlock(path); err != nil {
		t.Fatalf("after release: %v", err)
	}
	f.Close()
}
