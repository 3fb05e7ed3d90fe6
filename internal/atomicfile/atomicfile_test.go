package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apbridge/apbridge/internal/atomicfile"
)

// A write replaces the file whole and leaves no temporary file behind, and
// a write into a directory that is not there fails without a trace.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.state.json")
	for _, content := range []string{"first", "second, longer than the first"} {
		if err := atomicfile.Write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("directory holds %v (%v): want the file alone", entries, err)
	}
	if err := atomicfile.Write(filepath.Join(dir, "missing", "x"), []byte("x")); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}
