package mxsource

import (
	"testing"
	"time"

	"github.com/apbridge/apbridge/mxgateway"
)

// Both gateways read the same Galaxy: a change has the same timestamp on
// both, which is what tells a repeat or a stale change from a new one.
func TestItemSeen(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	last := mxgateway.DataChange{Value: int64(5), Timestamp: t0}
	tests := []struct {
		name string
		d    mxgateway.DataChange
		want bool
	}{
		{"older", mxgateway.DataChange{Value: int64(4), Timestamp: t0.Add(-time.Millisecond)}, true},
		{"the same change again", mxgateway.DataChange{Value: int64(5), Timestamp: t0}, true},
		{"another value at the same time", mxgateway.DataChange{Value: int64(6), Timestamp: t0}, false},
		{"newer", mxgateway.DataChange{Value: int64(6), Timestamp: t0.Add(time.Millisecond)}, false},
		{"no timestamp", mxgateway.DataChange{Value: int64(5)}, false},
	}
	for _, tt := range tests {
		it := &item{}
		if it.seen(tt.d) {
			t.Errorf("%s: seen before anything was relayed", tt.name)
		}
		it.relayed(last)
		if got := it.seen(tt.d); got != tt.want {
			t.Errorf("%s: seen = %v, want %v", tt.name, got, tt.want)
		}
		if got, want := it.older(tt.d), tt.name == "older"; got != want {
			t.Errorf("%s: older = %v, want %v", tt.name, got, want)
		}
	}
}
