package relay

import "testing"

// TestMarkVerdict: a confirmed mark acknowledges only while its
// generation is current and its lease valid; a lease not valid holds it;
// a generation ended drops it, whatever the lease.
func TestMarkVerdict(t *testing.T) {
	for _, tc := range []struct {
		live, valid bool
		want        markVerdict
	}{
		{true, true, markAck},
		{true, false, markHold},
		{false, true, markDrop},
		{false, false, markDrop},
	} {
		if got := verdict(tc.live, tc.valid); got != tc.want {
			t.Errorf("verdict(live %v, valid %v) = %d, want %d", tc.live, tc.valid, got, tc.want)
		}
	}
}
