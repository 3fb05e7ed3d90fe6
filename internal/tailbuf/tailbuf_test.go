package tailbuf

import (
	"strings"
	"sync"
	"testing"
)

func TestBufferKeepsTheLastBytes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{"under", 8, []string{"abc", "de"}, "abcde"},
		{"exactly", 5, []string{"abc", "de"}, "abcde"},
		{"over across writes", 4, []string{"abc", "def"}, "cdef"},
		{"one write over", 3, []string{"abcdefgh"}, "fgh"},
		{"zero keeps nothing", 0, []string{"abc"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.max)
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if got := b.String(); got != tc.want {
				t.Fatalf("kept %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBufferConcurrentWrites(t *testing.T) {
	b := New(100)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				b.Write([]byte("ab"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("ab", 50) {
		t.Fatalf("kept %q", got)
	}
}
