package uaserver

import "testing"

// TestTiers covers every row of the truth table of OtOpcUa's redundancy
// design, the row we added, and the order in which the rows are checked.
func TestTiers(t *testing.T) {
	healthy := Health{MemberUp: true, StoreReachable: true, PeerProbeOK: true}
	with := func(mod func(*Health)) Health {
		h := healthy
		mod(&h)
		return h
	}
	tests := []struct {
		name string
		h    Health
		want byte
	}{
		{"healthy follower", healthy, 240},
		{"healthy primary", with(func(h *Health) { h.Primary = true }), 250},
		{"stale, store reachable", with(func(h *Health) { h.Stale = true }), 200},
		{"stale primary", with(func(h *Health) { h.Stale, h.Primary = true, true }), 200},
		{"store unreachable and stale", with(func(h *Health) { h.StoreReachable, h.Stale = false, true }), 100},
		{"store unreachable implies stale", with(func(h *Health) { h.StoreReachable = false }), 100},
		{"unreachable primary", with(func(h *Health) { h.StoreReachable, h.Primary = false, true }), 100},
		{"fresh, reachable, peer probe failed", with(func(h *Health) { h.PeerProbeOK = false }), 200},
		{"primary with a failed peer probe", with(func(h *Health) { h.PeerProbeOK, h.Primary = false, true }), 200},
		{"stale and a failed peer probe", with(func(h *Health) { h.PeerProbeOK, h.Stale = false, true }), 200},
		{"unreachable and a failed peer probe", with(func(h *Health) { h.PeerProbeOK, h.StoreReachable = false, false }), 100},
		{"not a member", with(func(h *Health) { h.MemberUp = false }), 0},
		{"not a member, primary", with(func(h *Health) { h.MemberUp, h.Primary = false, true }), 0},
		{"down beats critically degraded", with(func(h *Health) { h.MemberUp, h.StoreReachable = false, false }), 0},
		{"zero value", Health{}, 0},
	}
	for _, tt := range tests {
		if got := Tiers(tt.h); got != tt.want {
			t.Errorf("%s: Tiers(%+v) = %d, want %d", tt.name, tt.h, got, tt.want)
		}
	}
}
