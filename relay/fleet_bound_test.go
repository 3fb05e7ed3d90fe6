package relay

import (
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/rs/zerolog"
)

// boundSource is a source that bounds its subscribe replies (as a gateway
// source does with its command timeout); only that method is called.
type boundSource struct {
	bridge.Source
	d time.Duration
}

func (s boundSource) SubscribeReplyBound() time.Duration { return s.d }

// A source wrapped for a fleet keeps its reply bound, so that the bridge's
// guard waits as long for a gateway's subscribe in a fleet as alone.
func TestLeasedSourceKeepsTheReplyBound(t *testing.T) {
	f := newFleetPart(&FleetConfig{RelayID: "r1"}, zerolog.Nop())
	var ls bridge.Source = f.lease("gw", boundSource{d: 65 * time.Second}, nil)
	rb, ok := ls.(bridge.ReplyBounder)
	if !ok || rb.SubscribeReplyBound() != 65*time.Second {
		t.Fatalf("the wrapped source bounds replies at %v (ok %v), want 65s", rb, ok)
	}
	// The control: a source without a bound adds none.
	var plain struct{ bridge.Source }
	if d := f.lease("opc", plain, nil).SubscribeReplyBound(); d != 0 {
		t.Fatalf("a source without a bound got %v", d)
	}
}
