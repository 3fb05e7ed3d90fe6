package bridge

import (
	"strings"
	"testing"

	"github.com/apbridge/apbridge/wire"
)

// TestCheckSnapshotRequest: the cursor must be a subject that the
// request's own source and prefix select, as every "next" is.
func TestCheckSnapshotRequest(t *testing.T) {
	tags := map[string]string{"p.a.T1": "a", "p.a.T2": "a", "p.b.T1": "b"}
	sc := snapshotScope{page: 10, sources: []string{"a", "b"}, sourceOf: func(s string) (string, bool) {
		src, ok := tags[s]
		return src, ok
	}}
	for _, c := range []struct {
		r          wire.SnapshotRequest
		code, want string
	}{
		{wire.SnapshotRequest{Source: "a", After: "p.b.T1"}, "400", `after: "p.b.T1" is a tag of source "b", not of "a"`},
		{wire.SnapshotRequest{Prefix: "p.a.", After: "p.b.T1"}, "400", `after: "p.b.T1" does not start with the prefix "p.a."`},
		{wire.SnapshotRequest{After: "p.c.T1"}, "400", `after: "p.c.T1" is not the subject of a tag of this relay`},
		{wire.SnapshotRequest{Source: "c"}, "404", `source: "c" is not a source of this relay (valid: a, b)`},
		{wire.SnapshotRequest{Limit: 11}, "400", `limit: 11 is out of range (valid 0-10; 0 means 10)`},
		{wire.SnapshotRequest{Prefix: "\x00"}, "400", `prefix: "\x00" has whitespace or a control character at byte 0`},
		{wire.SnapshotRequest{Prefix: ".p"}, "400", `prefix: ".p" has an empty token`},
		{wire.SnapshotRequest{Source: strings.Repeat("s", 1000)}, "404", `source: "` + strings.Repeat("s", 64) + `…" is not`},
	} {
		code, err := checkSnapshotRequest(c.r, sc)
		if code != c.code || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+.80v: %s %v, want %s %q", c.r, code, err, c.code, c.want)
		}
	}
	for _, r := range []wire.SnapshotRequest{
		{},
		{Limit: 10},
		{Source: "a", Prefix: "p.a.", After: "p.a.T1"},
		{Source: "b", After: "p.b.T1"},
		{Prefix: "p.a.T", After: "p.a.T2"},
		{Prefix: "nothing"},
	} {
		if code, err := checkSnapshotRequest(r, sc); err != nil {
			t.Errorf("%+v: %s %v", r, code, err)
		}
	}
}
