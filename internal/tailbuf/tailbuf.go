// Package tailbuf keeps the last bytes written to it: the end of a child
// process's stderr, which says why it ended, without holding all of a
// long-running child's output.
package tailbuf

import "sync"

// Buffer is an io.Writer that keeps the last Max bytes written to it. Its
// zero value keeps nothing; it is safe for concurrent use, as exec.Cmd
// writes a child's stderr from a goroutine of its own.
type Buffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// New returns a Buffer that keeps the last max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

// Write keeps the end of p, and of what came before it, up to max bytes.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// String returns what it keeps.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
