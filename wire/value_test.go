package wire

import "testing"

func TestStatusQuality(t *testing.T) {
	tests := []struct {
		s StatusCode
		q Quality
	}{
		{StatusGood, QualityGood}, {0x00A00000, QualityGood}, {StatusUncertain, QualityUncertain},
		{0x408F0000, QualityUncertain}, {StatusBadNodeIDUnknown, QualityBad}, {0xC0000000, QualityBad},
	}
	for _, tt := range tests {
		if got := tt.s.Quality(); got != tt.q {
			t.Errorf("%v.Quality() = %v, want %v", tt.s, got, tt.q)
		}
	}
}
