package wire

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
)

// fuzzValue builds a value of every type the codec carries from the
// fuzzer's inputs.
func fuzzValue(kind uint8, i int64, f float64, s string, b []byte) any {
	switch kind % 17 {
	case 0:
		return i&1 == 1
	case 1:
		return int8(i)
	case 2:
		return uint8(i)
	case 3:
		return int16(i)
	case 4:
		return uint16(i)
	case 5:
		return int32(i)
	case 6:
		return uint32(i)
	case 7:
		return i
	case 8:
		return uint64(i)
	case 9:
		return float32(f)
	case 10:
		return f
	case 11:
		return s
	case 12:
		return b
	case 13:
		return time.Unix(0, i).UTC()
	case 14:
		return []float64{f, float64(i)}
	case 15:
		return []string{s, ""}
	}
	return nil
}

// jsonString is what encoding/json makes of s: invalid UTF-8 becomes
// U+FFFD.
func jsonString(t *testing.T, s string) string {
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzCodecRoundTrip: every update AppendJSON writes is valid JSON that
// encoding/json reads with the same tag, error and status, and DecodeJSON
// reads back to an update that encodes to the same bytes.
func FuzzCodecRoundTrip(f *testing.F) {
	f.Add("Line1.Temp", uint8(10), int64(42), 21.5, "text", []byte{1, 2}, uint32(0), "")
	f.Add("tag \"quoted\"\n", uint8(9), int64(-1), math.Inf(1), "\xff\xfe", []byte(nil), uint32(0x80340000), "bad \u2028 line")
	f.Add("", uint8(7), int64(math.MinInt64), math.NaN(), "<&>", []byte("x"), uint32(0x40000000), "e")
	f.Add("t", uint8(13), int64(1700000000123456789), math.Copysign(0, -1), "", []byte{}, uint32(1), "")
	f.Fuzz(func(t *testing.T, tag string, kind uint8, i int64, fl float64, s string, b []byte, status uint32, errText string) {
		u := Update{Tag: tag, Seq: uint64(i), Value: fuzzValue(kind, i, fl, s, b), Status: StatusCode(status),
			SourceTime: time.Unix(0, i/2).UTC(), ServerTime: time.Unix(0, i/3).UTC(), Err: errText}
		data, err := AppendJSON(nil, &u)
		if err != nil {
			t.Fatalf("AppendJSON(%+v): %v", u, err)
		}
		if !json.Valid(data) {
			t.Fatalf("not valid JSON: %s", data)
		}
		var m struct {
			Tag    string `json:"tag"`
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("encoding/json: %v: %s", err, data)
		}
		if m.Tag != jsonString(t, tag) || m.Error != jsonString(t, errText) || m.Status != StatusCode(status).String() {
			t.Fatalf("encoding/json reads %+v from %s", m, data)
		}
		back, err := DecodeJSON(data)
		if err != nil {
			t.Fatalf("DecodeJSON(%s): %v", data, err)
		}
		again, err := AppendJSON(nil, &back)
		if err != nil || !sameJSON(t, again, data) {
			t.Fatalf("round trip:\n%s\n%s (%v)", data, again, err)
		}
	})
}

// sameJSON reports whether a and b are the same JSON document, as
// encoding/json reads them ("\ufffd" and the character itself are one).
func sameJSON(t *testing.T, a, b []byte) bool {
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// FuzzDecodeJSON: any input is decoded or refused without a panic, and
// what is decoded encodes and decodes to itself.
func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"tag":"A","seq":1,"type":"Double","value":1.5,"quality":"Good","status":"0x00000000"}`))
	f.Add([]byte(`{"tag":"A","type":"Int64[]","value":["1","-2"],"status":"0x80000000"}`))
	f.Add([]byte(`{"type":"DateTime","value":"2026-12-01T00:00:00Z","status":"0"}`))
	f.Add([]byte(`{"type":"ByteString","value":"AAE=","status":"0x1"}`))
	f.Add([]byte(`{"type":"Float","value":"NaN","status":"0x0"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := DecodeJSON(data)
		if err != nil {
			return
		}
		enc, err := AppendJSON(nil, &u)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", u, err)
		}
		u2, err := DecodeJSON(enc)
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		enc2, _ := AppendJSON(nil, &u2)
		if !sameJSON(t, enc, enc2) {
			t.Fatalf("not stable:\n%s\n%s", enc, enc2)
		}
	})
}
