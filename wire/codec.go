package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the JSON payload of u to dst (schema: docs/payload.md).
// It reports an error only for a value of a type TypeOf does not know.
//
// 64-bit integers are written as strings and NaN and infinities as the
// strings "NaN", "Infinity" and "-Infinity", as proto3's JSON mapping does:
// JSON numbers lose precision past 2^53 in many consumers and have no NaN.
func AppendJSON(dst []byte, u *Update) ([]byte, error) {
	typ, ok := TypeOf(u.Value)
	if !ok {
		return dst, fmt.Errorf("wire: tag %q: unsupported value type %T", u.Tag, u.Value)
	}
	return appendJSON(dst, u, typ, nil), nil
}

// jsonMarks are where appendJSON wrote the fields that the headers repeat,
// as [start, end) offsets into the buffer; a zero mark is a field not
// written.
type jsonMarks struct {
	status, seq, sourceTime, serverTime [2]int
}

// appendJSON is AppendJSON for a value of type typ; with marks it records
// where the fields the headers repeat are.
func appendJSON(dst []byte, u *Update, typ Type, marks *jsonMarks) []byte {
	var mk jsonMarks
	dst = append(dst, `{"tag":`...)
	dst = appendString(dst, u.Tag)
	dst = append(dst, `,"seq":`...)
	mk.seq[0] = len(dst)
	dst = strconv.AppendUint(dst, u.Seq, 10)
	mk.seq[1] = len(dst)
	dst = append(dst, `,"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","value":`...)
	dst = appendValue(dst, u.Value)
	dst = append(dst, `,"quality":"`...)
	dst = append(dst, u.Status.Quality().String()...)
	dst = append(dst, `","status":"`...)
	mk.status[0] = len(dst)
	dst = appendStatus(dst, u.Status)
	mk.status[1] = len(dst)
	dst = append(dst, '"')
	if !u.SourceTime.IsZero() {
		dst = append(dst, `,"sourceTime":"`...)
		mk.sourceTime[0] = len(dst)
		dst = u.SourceTime.UTC().AppendFormat(dst, time.RFC3339Nano)
		mk.sourceTime[1] = len(dst)
		dst = append(dst, '"')
	}
	if !u.ServerTime.IsZero() {
		dst = append(dst, `,"serverTime":"`...)
		mk.serverTime[0] = len(dst)
		dst = u.ServerTime.UTC().AppendFormat(dst, time.RFC3339Nano)
		mk.serverTime[1] = len(dst)
		dst = append(dst, '"')
	}
	if u.Err != "" {
		dst = append(dst, `,"error":`...)
		dst = appendString(dst, u.Err)
	}
	if marks != nil {
		*marks = mk
	}
	return append(dst, '}')
}

func appendStatus(dst []byte, s StatusCode) []byte {
	const hexd = "0123456789ABCDEF"
	dst = append(dst, '0', 'x')
	for i := 28; i >= 0; i -= 4 {
		dst = append(dst, hexd[(s>>uint(i))&0xF])
	}
	return dst
}

func appendValue(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, x)
	case int8:
		return strconv.AppendInt(dst, int64(x), 10)
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10)
	case int16:
		return strconv.AppendInt(dst, int64(x), 10)
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10)
	case int32:
		return strconv.AppendInt(dst, int64(x), 10)
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10)
	case int64:
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, x, 10)
		return append(dst, '"')
	case uint64:
		dst = append(dst, '"')
		dst = strconv.AppendUint(dst, x, 10)
		return append(dst, '"')
	case float32:
		return appendFloat(dst, float64(x), 32)
	case float64:
		return appendFloat(dst, x, 64)
	case string:
		return appendString(dst, x)
	case time.Time:
		dst = append(dst, '"')
		dst = x.UTC().AppendFormat(dst, time.RFC3339Nano)
		return append(dst, '"')
	case []byte:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, x)
		return append(dst, '"')
	case []bool:
		return appendSlice(dst, x)
	case []int8:
		return appendSlice(dst, x)
	case []int16:
		return appendSlice(dst, x)
	case []uint16:
		return appendSlice(dst, x)
	case []int32:
		return appendSlice(dst, x)
	case []uint32:
		return appendSlice(dst, x)
	case []int64:
		return appendSlice(dst, x)
	case []uint64:
		return appendSlice(dst, x)
	case []float32:
		return appendSlice(dst, x)
	case []float64:
		return appendSlice(dst, x)
	case []string:
		return appendSlice(dst, x)
	case []time.Time:
		return appendSlice(dst, x)
	}
	return append(dst, "null"...)
}

func appendSlice[T any](dst []byte, s []T) []byte {
	dst = append(dst, '[')
	for i, v := range s {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendValue(dst, v)
	}
	return append(dst, ']')
}

func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func appendString(dst []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c >= 0x20 && c != '<' && c != '>' && c != '&':
				dst = append(dst, c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xF])
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			dst = append(dst, '\\', 'u', '2', '0', '2', hexd[r&0xF])
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// wireUpdate is the JSON shape of an update, for decoding.
type wireUpdate struct {
	Tag        string          `json:"tag"`
	Seq        uint64          `json:"seq"`
	Type       Type            `json:"type"`
	Value      json.RawMessage `json:"value"`
	Quality    string          `json:"quality"`
	Status     string          `json:"status"`
	SourceTime time.Time       `json:"sourceTime"`
	ServerTime time.Time       `json:"serverTime"`
	Error      string          `json:"error"`
}

// DecodeJSON parses a payload written by AppendJSON: the inverse a consumer
// written in Go can use.
func DecodeJSON(data []byte) (Update, error) {
	var w wireUpdate
	if err := json.Unmarshal(data, &w); err != nil {
		return Update{}, fmt.Errorf("wire: decode update: %w", err)
	}
	code, err := strconv.ParseUint(strings.TrimPrefix(w.Status, "0x"), 16, 32)
	if err != nil {
		return Update{}, fmt.Errorf("wire: decode update: status %.64q: %w", w.Status, err)
	}
	v, err := DecodeValue(w.Type, w.Value)
	if err != nil {
		return Update{}, err
	}
	return Update{
		Tag: w.Tag, Seq: w.Seq, Value: v, Status: StatusCode(code),
		SourceTime: w.SourceTime, ServerTime: w.ServerTime, Err: w.Error,
	}, nil
}

// DecodeValue converts a JSON value to the Go type that carries typ. It is
// used for updates and for the values of write requests.
func DecodeValue(typ Type, raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	if typ == TypeNull || len(raw) == 0 || string(raw) == "null" {
		if typ != TypeNull && typ != "" {
			return nil, fmt.Errorf("value: null is not a %s", typ)
		}
		return nil, nil
	}
	if typ.IsArray() {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fmt.Errorf("value: want a JSON array of %s: %w", typ.Elem(), err)
		}
		return decodeArray(typ.Elem(), items)
	}
	return decodeScalar(typ, raw)
}

func decodeArray(elem Type, items []json.RawMessage) (any, error) {
	var out any
	for i, it := range items {
		v, err := decodeScalar(elem, it)
		if err != nil {
			return nil, fmt.Errorf("value[%d]: %w", i, err)
		}
		switch x := v.(type) {
		case bool:
			out = appendAny(out, x, len(items))
		case int8:
			out = appendAny(out, x, len(items))
		case int16:
			out = appendAny(out, x, len(items))
		case uint16:
			out = appendAny(out, x, len(items))
		case int32:
			out = appendAny(out, x, len(items))
		case uint32:
			out = appendAny(out, x, len(items))
		case int64:
			out = appendAny(out, x, len(items))
		case uint64:
			out = appendAny(out, x, len(items))
		case float32:
			out = appendAny(out, x, len(items))
		case float64:
			out = appendAny(out, x, len(items))
		case string:
			out = appendAny(out, x, len(items))
		case time.Time:
			out = appendAny(out, x, len(items))
		default:
			return nil, fmt.Errorf("value: arrays of %s are not supported", elem)
		}
	}
	if out == nil {
		return emptyArray(elem)
	}
	return out, nil
}

func appendAny[T any](out any, v T, n int) any {
	s, _ := out.([]T)
	if s == nil {
		s = make([]T, 0, n)
	}
	return append(s, v)
}

func emptyArray(elem Type) (any, error) {
	switch elem {
	case TypeBoolean:
		return []bool{}, nil
	case TypeSByte:
		return []int8{}, nil
	case TypeInt16:
		return []int16{}, nil
	case TypeUInt16:
		return []uint16{}, nil
	case TypeInt32:
		return []int32{}, nil
	case TypeUInt32:
		return []uint32{}, nil
	case TypeInt64:
		return []int64{}, nil
	case TypeUInt64:
		return []uint64{}, nil
	case TypeFloat:
		return []float32{}, nil
	case TypeDouble:
		return []float64{}, nil
	case TypeString:
		return []string{}, nil
	case TypeDateTime:
		return []time.Time{}, nil
	}
	return nil, fmt.Errorf("value: arrays of %s are not supported", elem)
}

func decodeScalar(typ Type, raw json.RawMessage) (any, error) {
	var num json.Number
	unquoted := raw
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("value: %w", err)
		}
		unquoted = []byte(s)
	}
	number := func() error {
		num = json.Number(unquoted)
		if _, err := strconv.ParseFloat(string(unquoted), 64); err != nil {
			return fmt.Errorf("value: %s is not a %s", jsonKind(raw), typ)
		}
		return nil
	}
	integer := func(bits int, signed bool) (any, error) {
		if err := number(); err != nil {
			return nil, err
		}
		if signed {
			n, err := strconv.ParseInt(num.String(), 10, bits)
			if err != nil {
				return nil, fmt.Errorf("value: %s is not a %s (a whole number in the %d-bit signed range)", jsonKind(raw), typ, bits)
			}
			return n, nil
		}
		n, err := strconv.ParseUint(num.String(), 10, bits)
		if err != nil {
			return nil, fmt.Errorf("value: %s is not a %s (a whole number in the %d-bit unsigned range)", jsonKind(raw), typ, bits)
		}
		return n, nil
	}
	switch typ {
	case TypeBoolean:
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("value: %s is not a Boolean", jsonKind(raw))
		}
		return b, nil
	case TypeSByte:
		n, err := integer(8, true)
		if err != nil {
			return nil, err
		}
		return int8(n.(int64)), nil
	case TypeByte:
		n, err := integer(8, false)
		if err != nil {
			return nil, err
		}
		return uint8(n.(uint64)), nil
	case TypeInt16:
		n, err := integer(16, true)
		if err != nil {
			return nil, err
		}
		return int16(n.(int64)), nil
	case TypeUInt16:
		n, err := integer(16, false)
		if err != nil {
			return nil, err
		}
		return uint16(n.(uint64)), nil
	case TypeInt32:
		n, err := integer(32, true)
		if err != nil {
			return nil, err
		}
		return int32(n.(int64)), nil
	case TypeUInt32:
		n, err := integer(32, false)
		if err != nil {
			return nil, err
		}
		return uint32(n.(uint64)), nil
	case TypeInt64:
		n, err := integer(64, true)
		if err != nil {
			return nil, err
		}
		return n.(int64), nil
	case TypeUInt64:
		n, err := integer(64, false)
		if err != nil {
			return nil, err
		}
		return n.(uint64), nil
	case TypeFloat, TypeDouble:
		bits := 64
		if typ == TypeFloat {
			bits = 32
		}
		var f float64
		switch string(unquoted) {
		case "NaN":
			f = math.NaN()
		case "Infinity":
			f = math.Inf(1)
		case "-Infinity":
			f = math.Inf(-1)
		default:
			var err error
			if f, err = strconv.ParseFloat(string(unquoted), bits); err != nil {
				return nil, fmt.Errorf("value: %s is not a %s", jsonKind(raw), typ)
			}
		}
		if bits == 32 {
			return float32(f), nil
		}
		return f, nil
	case TypeString:
		if raw[0] != '"' {
			return nil, fmt.Errorf("value: %s is not a String", jsonKind(raw))
		}
		return string(unquoted), nil
	case TypeDateTime:
		t, err := time.Parse(time.RFC3339Nano, string(unquoted))
		if err != nil {
			return nil, fmt.Errorf("value: %s is not a DateTime (RFC 3339)", jsonKind(raw))
		}
		return t, nil
	case TypeByteString:
		b, err := base64.StdEncoding.DecodeString(string(unquoted))
		if err != nil {
			return nil, fmt.Errorf("value: %s is not a ByteString (base64)", jsonKind(raw))
		}
		return b, nil
	}
	// The type may be a client's: quoted, but only its first 64 runes.
	return nil, fmt.Errorf("value: type %.64q is not supported", typ)
}

// jsonKind names the kind of a JSON value for an error message, which
// must not repeat the value: a write request's value may be a secret, or
// larger than a reply may be.
func jsonKind(raw []byte) string {
	if len(raw) == 0 {
		return "an empty value"
	}
	switch raw[0] {
	case '"':
		return "a JSON string"
	case '{':
		return "a JSON object"
	case '[':
		return "a JSON array"
	case 't', 'f':
		return "a JSON Boolean"
	case 'n':
		return "null"
	}
	return "a JSON number"
}
