package servicelevel

import "testing"

func TestBandOf(t *testing.T) {
	tests := []struct {
		v    uint8
		want Band
	}{
		{0, BandMaintenance},
		{1, BandNoData},
		{2, BandDegraded},
		{50, BandDegraded},
		{90, BandDegraded},
		{199, BandDegraded},
		{200, BandHealthy},
		{240, BandHealthy},
		{250, BandHealthy},
		{255, BandHealthy},
	}
	for _, tt := range tests {
		if got := BandOf(tt.v); got != tt.want {
			t.Errorf("BandOf(%d) = %v, want %v", tt.v, got, tt.want)
		}
		if got := LevelOf(tt.v).Band(); got != tt.want {
			t.Errorf("LevelOf(%d).Band() = %v, want %v", tt.v, got, tt.want)
		}
	}
	if got := Unknown().Band(); got != BandUnknown {
		t.Errorf("Unknown().Band() = %v", got)
	}
}

func TestBandString(t *testing.T) {
	for b, want := range map[Band]string{
		BandUnknown: "Unknown", BandMaintenance: "Maintenance", BandNoData: "NoData",
		BandDegraded: "Degraded", BandHealthy: "Healthy", Band(9): "Band(9)",
	} {
		if got := b.String(); got != want {
			t.Errorf("Band(%d).String() = %q, want %q", uint8(b), got, want)
		}
	}
}

func TestLevelPredicates(t *testing.T) {
	tests := []struct {
		l                                     Level
		known, healthy, unhealthy, maintenace bool
		str                                   string
	}{
		{Unknown(), false, false, false, false, "unknown"},
		{Level{}, false, false, false, false, "unknown"},
		{LevelOf(0), true, false, true, true, "0"},
		{LevelOf(1), true, false, true, false, "1"},
		{LevelOf(199), true, false, true, false, "199"},
		{LevelOf(200), true, true, false, false, "200"},
		{LevelOf(255), true, true, false, false, "255"},
	}
	for _, tt := range tests {
		if tt.l.Known() != tt.known || tt.l.Healthy() != tt.healthy || tt.l.Unhealthy() != tt.unhealthy || tt.l.Maintenance() != tt.maintenace {
			t.Errorf("%v: known %v healthy %v unhealthy %v maintenance %v", tt.l, tt.l.Known(), tt.l.Healthy(), tt.l.Unhealthy(), tt.l.Maintenance())
		}
		if got := tt.l.String(); got != tt.str {
			t.Errorf("String() = %q, want %q", got, tt.str)
		}
		if v, ok := tt.l.Value(); ok != tt.known || (ok && LevelOf(v) != tt.l) {
			t.Errorf("%v.Value() = %d, %v", tt.l, v, ok)
		}
	}
}

func TestLevelFromValue(t *testing.T) {
	tests := []struct {
		name  string
		value any
		good  bool
		want  Level
	}{
		{"Good Byte", uint8(250), true, LevelOf(250)},
		{"Good Byte 0", uint8(0), true, LevelOf(0)},
		{"Bad status", uint8(250), false, Unknown()},
		{"no value", nil, true, Unknown()},
		{"Int32", int32(250), true, Unknown()},
		{"int", 250, true, Unknown()},
		{"string", "250", true, Unknown()},
		{"SByte", int8(100), true, Unknown()},
	}
	for _, tt := range tests {
		if got := LevelFromValue(tt.value, tt.good); got != tt.want {
			t.Errorf("%s: LevelFromValue(%#v, %v) = %v, want %v", tt.name, tt.value, tt.good, got, tt.want)
		}
	}
}

// TestPreferableTo pins the switch target rule on its own: Healthy and
// strictly higher. Through the Policy, every trigger already has an active
// level below 200, so "higher" can only be seen failing here.
func TestPreferableTo(t *testing.T) {
	tests := []struct {
		peer, active Level
		want         bool
	}{
		{LevelOf(250), LevelOf(90), true},
		{LevelOf(200), LevelOf(0), true},
		{LevelOf(250), Unknown(), true},
		{LevelOf(240), LevelOf(250), false}, // a secondary never pulls a client off the primary
		{LevelOf(250), LevelOf(250), false}, // equal is not higher
		{LevelOf(210), LevelOf(220), false},
		{LevelOf(199), LevelOf(50), false}, // higher but not Healthy
		{LevelOf(90), LevelOf(50), false},
		{Unknown(), LevelOf(0), false}, // unreachable
	}
	for _, tt := range tests {
		if got := tt.peer.PreferableTo(tt.active); got != tt.want {
			t.Errorf("%v.PreferableTo(%v) = %v, want %v", tt.peer, tt.active, got, tt.want)
		}
	}
}
