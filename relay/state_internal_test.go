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

// A state file of this version and this source gives the source its
// serving endpoint's handoff, once; any other file is ignored with one
// warning each, and a missing one silently.
func TestStateStoreTakeover(t *testing.T) {
	dir := t.TempDir()
	var logged strings.Builder
	st := newStateStore(dir, zerolog.New(&logged))
	rec := st.recorder("opc1")
	rec(uaclient.Handoff{URL: "opc.tcp://b", Endpoint: "backup", DataSub: 3, NextUnacked: 4})
	rec(uaclient.Handoff{URL: "opc.tcp://a", Endpoint: "primary", HealthSub: 1, DataSub: 2, NextUnacked: 7,
		Items: []uaclient.HandoffItem{{Handle: 1, ID: 9, Node: "ns=1;s=C", SamplingMs: 50, QueueSize: 10}}})
	st.close()

	next := newStateStore(dir, zerolog.New(&logged))
	h, ok := next.takeover("opc1")
	if !ok || h.Endpoint != "primary" || h.NextUnacked != 7 || len(h.Items) != 1 || h.Items[0].QueueSize != 10 {
		t.Fatalf("takeover = %+v, %v; want the primary's handoff, acknowledged up to 7, with its item's settings", h, ok)
	}
	if _, ok := next.takeover("opc1"); ok {
		t.Fatal("a second takeover of the same source")
	}
	if logged.Len() != 0 {
		t.Fatalf("warnings for a good file: %s", logged.String())
	}

	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, stateFileName(name)), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("garbage", "{not json")
	write("old", `{"version": 1, "source": "old", "serving": "primary", "endpoints": {"primary": {"url": "opc.tcp://a", "dataSubscription": 2, "nextUnacked": 3}}}`)
	write("foreign", fmt.Sprintf(`{"version": %d, "source": "other", "serving": "primary", "endpoints": {"primary": {"url": "opc.tcp://a"}}}`, stateVersion))
	for _, name := range []string{"garbage", "old", "foreign", "missing"} {
		logged.Reset()
		st := newStateStore(dir, zerolog.New(&logged))
		if h, ok := st.takeover(name); ok {
			t.Fatalf("%s: takeover %+v from a file to ignore", name, h)
		}
		lines := strings.Count(logged.String(), "\n")
		if want := map[bool]int{true: 0, false: 1}[name == "missing"]; lines != want {
			t.Fatalf("%s: %d log lines (%s), want %d", name, lines, logged.String(), want)
		}
	}
}
