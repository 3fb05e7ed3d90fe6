package main

import (
	"io"
	"strings"
	"testing"

	"github.com/apbridge/apbridge/internal/testutil"
)

// TestDemoExitsZero runs `apbridge demo` as make demo does.
func TestDemoExitsZero(t *testing.T) {
	var out testutil.SyncBuffer
	if code := run([]string{"demo"}, &out, io.Discard); code != 0 {
		t.Fatalf("demo exited %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "OK: no tag update lost") {
		t.Fatalf("demo output:\n%s", out.String())
	}
}
