package relay

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/rs/zerolog"
)

// The store writes each source's latest handoff, whole, and at its close
// the last one: a reader finds valid JSON with the values recorded last.
func TestStateStoreWritesLatestHandoff(t *testing.T) {
	dir := t.TempDir()
	st := newStateStore(dir, zerolog.Nop())
	rec := st.recorder("opc1")
	read := func() (sourceState, bool) {
		var s sourceState
		b, err := os.ReadFile(filepath.Join(dir, stateFileName("opc1")))
		return s, err == nil && json.Unmarshal(b, &s) == nil
	}
	for n := uint32(1); n <= 50; n++ {
		rec(uaclient.Handoff{URL: "opc.tcp://a", Endpoint: "primary", HealthSub: 1, DataSub: 2, NextUnacked: n})
	}
	testutil.WaitFor(t, "the state file", 5*time.Second, func() bool { _, ok := read(); return ok })
	rec(uaclient.Handoff{URL: "opc.tcp://a", Endpoint: "primary", HealthSub: 1, DataSub: 2, NextUnacked: 99})
	st.close()
	st.close() // idempotent
	s, ok := read()
	if !ok || s.Endpoints["primary"].NextUnacked != 99 || s.Endpoints["primary"].DataSub != 2 {
		t.Fatalf("state %+v: want the last handoff, acknowledged up to 99", s)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestCheckStateDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want string
	}{
		{"", ""},
		{filepath.Join(dir, "new", "state"), ""},
		{filepath.Join(file, "state"), "stateDir: "},
		{file, "stateDir: "},
	} {
		var errs []string
		checkStateDir(tc.dir, func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) })
		got := strings.Join(errs, "; ")
		if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Fatalf("checkStateDir(%q) = %q, want %q", tc.dir, got, tc.want)
		}
	}
}
