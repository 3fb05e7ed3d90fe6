package wire

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCodecRoundTrip(t *testing.T) {
	ts := time.Date(2026, 11, 30, 8, 15, 30, 123456789, time.UTC)
	values := []any{
		nil, true, false,
		int8(-128), uint8(255), int16(-32768), uint16(65535),
		int32(math.MinInt32), uint32(math.MaxUint32),
		int64(math.MinInt64), int64(math.MaxInt64), uint64(math.MaxUint64),
		float32(3.25), float32(-0.1), float64(21.5), math.SmallestNonzeroFloat64, math.MaxFloat64,
		"", "héllo \"wörld\"\n\t<&>\x01", ts, []byte{0, 1, 2, 255},
		[]bool{true, false}, []int8{-1, 2}, []int16{-3}, []uint16{4}, []int32{5, -6},
		[]uint32{7}, []int64{math.MinInt64}, []uint64{math.MaxUint64}, []float32{1.5},
		[]float64{1, 2.5}, []string{"a", "b"}, []time.Time{ts}, []float64{},
	}
	for _, v := range values {
		u := Update{Tag: "Line1.Temp", Value: v, Status: StatusGood, SourceTime: ts, ServerTime: ts.Add(time.Millisecond), Seq: 7}
		b, err := AppendJSON(nil, &u)
		if err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		if !json.Valid(b) {
			t.Fatalf("%T: invalid JSON %s", v, b)
		}
		got, err := DecodeJSON(b)
		if err != nil {
			t.Fatalf("%T: decode %s: %v", v, b, err)
		}
		if !reflect.DeepEqual(got, u) {
			t.Errorf("%T round trip:\n got %#v\nwant %#v\njson %s", v, got, u, b)
		}
	}
}

func TestCodecSpecialFloats(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		for _, v := range []any{f, float32(f)} {
			u := Update{Tag: "x", Value: v}
			b, err := AppendJSON(nil, &u)
			if err != nil || !json.Valid(b) {
				t.Fatalf("%v: %s %v", v, b, err)
			}
			got, err := DecodeJSON(b)
			if err != nil {
				t.Fatal(err)
			}
			g := reflect.ValueOf(got.Value).Float()
			if math.IsNaN(f) != math.IsNaN(g) || (!math.IsNaN(f) && f != g) {
				t.Errorf("%v came back as %v (%s)", v, got.Value, b)
			}
		}
	}
}

func TestCodecUnsupportedTypeIsReported(t *testing.T) {
	u := Update{Tag: "Weird", Value: struct{}{}}
	if _, err := AppendJSON(nil, &u); err == nil || !strings.Contains(err.Error(), "Weird") {
		t.Fatalf("err = %v, want one naming the tag", err)
	}
	bad := Unsupported("Weird", struct{ X int }{}, time.Time{}, time.Time{})
	if bad.Status.Quality() != QualityBad || bad.Value != nil || !strings.Contains(bad.Err, "struct") {
		t.Fatalf("Unsupported = %+v", bad)
	}
	b, err := AppendJSON(nil, &bad)
	if err != nil || !strings.Contains(string(b), `"value":null`) || !strings.Contains(string(b), `"quality":"Bad"`) {
		t.Fatalf("payload %s, %v", b, err)
	}
}

func TestCodecSchemaFields(t *testing.T) {
	u := Update{Tag: "T", Value: int64(1 << 60), Status: StatusBadOutOfService, Seq: 3}
	b, _ := AppendJSON(nil, &u)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"tag": "T", "seq": 3.0, "type": "Int64", "value": "1152921504606846976",
		"quality": "Bad", "status": "0x808D0000"}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("payload %v, want %v", m, want)
	}
}

func TestDecodeValueErrors(t *testing.T) {
	tests := []struct {
		typ Type
		raw string
	}{
		{TypeInt16, "40000"}, {TypeByte, "-1"}, {TypeBoolean, `"yes"`}, {TypeDouble, `"abc"`},
		{TypeString, "12"}, {TypeDateTime, `"yesterday"`}, {TypeInt32, "1.5"}, {TypeDouble + "[]", "1"},
		{TypeInt32 + "[]", `[1,"x"]`}, {"Variant", "1"}, {TypeDouble, "null"},
	}
	for _, tt := range tests {
		if v, err := DecodeValue(tt.typ, json.RawMessage(tt.raw)); err == nil {
			t.Errorf("DecodeValue(%s, %s) = %v, want an error", tt.typ, tt.raw, v)
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	u := Update{Tag: "Plant.Line1.Temperature", Value: 21.53, Status: StatusGood,
		SourceTime: time.Now(), ServerTime: time.Now(), Seq: 123456}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendJSON(buf[:0], &u)
	}
}
