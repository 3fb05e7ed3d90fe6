package relay

import (
	"strings"
	"testing"
)

// TestDerivedSubjectsOnlyFromGoodTags: the stream's subjects are worked
// out (and their problems reported) only when every source and tag is
// valid; a refused source or tag must not add a second, confusing error
// about subjects worked out without it.
func TestDerivedSubjectsOnlyFromGoodTags(t *testing.T) {
	for _, tc := range []struct{ name, old, new, want string }{
		{"no source name", "  - name: line1", "  - name: ''", "sources[0].name: required"},
		{"a source of an unknown type", "  - name: line1", "  - name: line1\n    type: modbus", "sources[0].type"},
		{"a tag on a service subject", "writable: true}", "writable: true, subject: apbridge.status}", "overlaps the service subject"},
		{"a tag in a reserved space", "writable: true}", "writable: true, subject: '$SYS.x'}", "reserved subject space"},
		{"two tags on one subject", "writable: true}", "writable: true, subject: apbridge.line1.Line1.Temp}", "is also the subject of"},
	} {
		cfg := edit("instance: site-a", "instance: site-a\nsink: jetstream")
		if !strings.Contains(cfg, tc.old) {
			t.Fatalf("%s: the edit does not apply", tc.name)
		}
		_, err := Parse([]byte(strings.Replace(cfg, tc.old, tc.new, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "jetstream.subjects") {
			t.Errorf("%s: the stream's subjects were worked out without the refused part:\n%v", tc.name, err)
		}
	}
}
