package servicelevel

import (
	"fmt"
	"testing"
	"time"
)

// TestCalculate covers every row of the truth table of OtOpcUa's
// redundancy design, the row we added, and each membership state.
func TestCalculate(t *testing.T) {
	healthy := NodeHealth{Member: MemberUp, DriverRole: true, ConfigStoreReachable: true}
	with := func(mod func(*NodeHealth)) NodeHealth {
		h := healthy
		mod(&h)
		return h
	}
	tests := []struct {
		name string
		h    NodeHealth
		want uint8
	}{
		{"healthy follower", healthy, 240},
		{"healthy primary", with(func(h *NodeHealth) { h.Primary = true }), 250},
		{"joining counts as a member", with(func(h *NodeHealth) { h.Member = MemberJoining }), 240},
		{"stale, config store reachable", with(func(h *NodeHealth) { h.Stale = true }), 200},
		{"stale primary", with(func(h *NodeHealth) { h.Stale, h.Primary = true, true }), 200},
		{"config store unreachable and stale", with(func(h *NodeHealth) { h.ConfigStoreReachable, h.Stale = false, true }), 100},
		{"config store unreachable implies stale", with(func(h *NodeHealth) { h.ConfigStoreReachable = false }), 100},
		{"unreachable primary", with(func(h *NodeHealth) { h.ConfigStoreReachable, h.Primary = false, true }), 100},
		{"fresh, reachable, recent peer probe failed", with(func(h *NodeHealth) { h.PeerProbeFailed = true }), 200},
		{"primary with a failed peer probe", with(func(h *NodeHealth) { h.PeerProbeFailed, h.Primary = true, true }), 200},
		{"stale and a failed peer probe", with(func(h *NodeHealth) { h.PeerProbeFailed, h.Stale = true, true }), 200},
		{"detached (no driver role)", with(func(h *NodeHealth) { h.DriverRole = false }), 0},
		{"detached primary", with(func(h *NodeHealth) { h.DriverRole, h.Primary = false, true }), 0},
		{"down beats critically degraded", with(func(h *NodeHealth) { h.Member, h.ConfigStoreReachable = MemberLeaving, false }), 0},
		{"zero value", NodeHealth{}, 0},
	}
	for _, m := range []MemberState{MemberUnknown, MemberWeaklyUp, MemberLeaving, MemberExiting, MemberDown, MemberRemoved} {
		tests = append(tests, struct {
			name string
			h    NodeHealth
			want uint8
		}{fmt.Sprintf("member %v", m), with(func(h *NodeHealth) { h.Member, h.Primary = m, true }), 0})
	}
	for _, tt := range tests {
		if got := Calculate(tt.h); got != tt.want {
			t.Errorf("%s: Calculate(%+v) = %d, want %d", tt.name, tt.h, got, tt.want)
		}
	}
}

func TestMemberStateString(t *testing.T) {
	if got := MemberUp.String(); got != "Up" {
		t.Errorf("MemberUp = %q", got)
	}
	if got := MemberState(42).String(); got != "MemberState(42)" {
		t.Errorf("invalid = %q", got)
	}
}

// TestCalculatorDerivation covers the derivation of Stale and of a failed peer
// probe from timestamps (as in OtOpcUa's design: 30 s freshness, benefit of
// the doubt for an absent or old probe result, DB-less nodes).
func TestCalculatorDerivation(t *testing.T) {
	now := time.Date(2026, 11, 13, 12, 0, 0, 0, time.UTC)
	ago := func(s int) time.Time { return now.Add(-time.Duration(s) * time.Second) }
	fresh := Observations{
		Member: MemberUp, DriverRole: true,
		RoleSnapshotAt:       ago(5),
		ConfigStoreReachable: true, ConfigStoreCheckedAt: ago(5),
	}
	with := func(mod func(*Observations)) Observations {
		o := fresh
		mod(&o)
		return o
	}
	tests := []struct {
		name string
		c    Calculator
		o    Observations
		want uint8
	}{
		{"fresh follower", Calculator{}, fresh, 240},
		{"fresh primary", Calculator{}, with(func(o *Observations) { o.Primary = true }), 250},
		{"snapshot exactly 30 s old is fresh", Calculator{}, with(func(o *Observations) { o.RoleSnapshotAt = ago(30) }), 240},
		{"snapshot 31 s old is stale", Calculator{}, with(func(o *Observations) { o.RoleSnapshotAt = ago(31) }), 200},
		{"no snapshot yet is stale", Calculator{}, with(func(o *Observations) { o.RoleSnapshotAt = time.Time{} }), 200},
		{"old config-store check is stale", Calculator{}, with(func(o *Observations) { o.ConfigStoreCheckedAt = ago(31) }), 200},
		{"unreachable config store", Calculator{}, with(func(o *Observations) { o.ConfigStoreReachable = false }), 100},
		{"recent failed peer probe", Calculator{}, with(func(o *Observations) { o.PeerProbeAt = ago(10) }), 200},
		{"recent good peer probe", Calculator{}, with(func(o *Observations) { o.PeerProbeOK, o.PeerProbeAt = true, ago(10) }), 240},
		{"old failed peer probe is forgotten", Calculator{}, with(func(o *Observations) { o.PeerProbeAt = ago(31) }), 240},
		{"DB-less node: config store never ages", Calculator{}, with(func(o *Observations) {
			o.ConfigStoreLocal, o.ConfigStoreReachable, o.ConfigStoreCheckedAt, o.Primary = true, false, time.Time{}, true
		}), 250},
		{"DB-less node: an old snapshot is still stale", Calculator{}, with(func(o *Observations) {
			o.ConfigStoreLocal, o.RoleSnapshotAt = true, ago(31)
		}), 200},
		{"custom freshness", Calculator{Freshness: 5 * time.Second}, with(func(o *Observations) { o.RoleSnapshotAt = ago(6) }), 200},
		{"leaving node", Calculator{}, with(func(o *Observations) { o.Member = MemberLeaving }), 0},
	}
	for _, tt := range tests {
		if got := tt.c.Calculate(tt.o, now); got != tt.want {
			t.Errorf("%s: Calculate = %d (health %+v), want %d", tt.name, got, tt.c.Health(tt.o, now), tt.want)
		}
	}
}
