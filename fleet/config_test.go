package fleet_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/fleet"
)

func TestConfigValidate(t *testing.T) {
	bad := fleet.Config{Bucket: "a.b", LeaseTTL: 1500 * time.Millisecond, RelayID: "", Replicas: 7, Dwell: -1,
		Pairs: []string{"ok", "no.dots", "ok"}}
	err := bad.Validate()
	for _, want := range []string{"bucket:", "leaseTTL: 1.5s", "relayId: required", "replicas: 7", "dwell:", "pairs[1]", "pairs[2]: \"ok\" is listed twice"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
	good := fleet.Config{RelayID: "r1", Pairs: []string{"line-1", "line_2"}}
	if err := good.Validate(); err != nil {
		t.Errorf("good config: %v", err)
	}
}

// Rendezvous placement moves only the pairs the new relay wins.
func TestRankMovesOneNth(t *testing.T) {
	moved, n := 0, 1200
	for i := range n {
		p := "p" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		before := fleet.Rank(p, []string{"r1", "r2", "r3"})[0]
		after := fleet.Rank(p, []string{"r1", "r2", "r3", "r4"})[0]
		if before != after {
			if after != "r4" {
				t.Fatalf("%s moved from %s to %s", p, before, after)
			}
			moved++
		}
	}
	if moved < n/4-n/10 || moved > n/4+n/10 {
		t.Errorf("%d of %d moved, want about a quarter", moved, n)
	}
}
