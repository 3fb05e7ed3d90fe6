package wire

import (
	"fmt"
	"time"
)

// StatusCode is an OPC UA StatusCode: the top two bits give the quality
// (Good, Uncertain, Bad), the rest says why. Sources that are not OPC UA map
// their own quality onto it.
type StatusCode uint32

// Status codes the relay itself uses.
const (
	StatusGood                StatusCode = 0x00000000
	StatusUncertain           StatusCode = 0x40000000
	StatusBad                 StatusCode = 0x80000000
	StatusBadNotConnected     StatusCode = 0x808A0000
	StatusBadOutOfService     StatusCode = 0x808D0000
	StatusBadTypeMismatch     StatusCode = 0x80740000
	StatusBadNotWritable      StatusCode = 0x803B0000
	StatusBadNodeIDUnknown    StatusCode = 0x80340000
	StatusBadWaitingForInit   StatusCode = 0x80320000
	StatusBadCommunicationErr StatusCode = 0x80050000
)

// Quality is the class of a StatusCode.
type Quality int

// The qualities, as StatusCode.Quality gives them.
const (
	QualityGood Quality = iota
	QualityUncertain
	QualityBad
)

// String returns the quality as the payload and the Apb-Quality header
// spell it: Good, Uncertain or Bad.
func (q Quality) String() string {
	switch q {
	case QualityGood:
		return "Good"
	case QualityUncertain:
		return "Uncertain"
	}
	return "Bad"
}

// Quality returns the class of s from its top two bits (OPC UA Part 4,
// 7.39); the reserved value 11 counts as Bad.
func (s StatusCode) Quality() Quality {
	switch s >> 30 {
	case 0:
		return QualityGood
	case 1:
		return QualityUncertain
	}
	return QualityBad
}

// String returns the code in the form OPC UA tools print it: 0x80340000.
func (s StatusCode) String() string { return string(appendStatus(make([]byte, 0, 10), s)) }

// Type names the type of a tag's value, with the OPC UA built-in type names
// so that a consumer can tell an Int16 from an Int64. Arrays append "[]".
type Type string

// The value types a Value may hold, and the Go type that carries each.
const (
	TypeBoolean    Type = "Boolean"    // bool
	TypeSByte      Type = "SByte"      // int8
	TypeByte       Type = "Byte"       // uint8
	TypeInt16      Type = "Int16"      // int16
	TypeUInt16     Type = "UInt16"     // uint16
	TypeInt32      Type = "Int32"      // int32
	TypeUInt32     Type = "UInt32"     // uint32
	TypeInt64      Type = "Int64"      // int64
	TypeUInt64     Type = "UInt64"     // uint64
	TypeFloat      Type = "Float"      // float32
	TypeDouble     Type = "Double"     // float64
	TypeString     Type = "String"     // string
	TypeDateTime   Type = "DateTime"   // time.Time
	TypeByteString Type = "ByteString" // []byte
	TypeNull       Type = "Null"       // nil: no value (Bad quality, or not yet read)
)

// IsArray reports whether t is an array type.
func (t Type) IsArray() bool { return len(t) > 2 && t[len(t)-2:] == "[]" }

// Elem returns the element type of an array type, or t.
func (t Type) Elem() Type {
	if t.IsArray() {
		return t[:len(t)-2]
	}
	return t
}

// TypeOf returns the Type of a Go value, and false if the relay cannot
// carry it. Slices of the scalar types are arrays.
func TypeOf(v any) (Type, bool) {
	switch v.(type) {
	case nil:
		return TypeNull, true
	case bool:
		return TypeBoolean, true
	case int8:
		return TypeSByte, true
	case uint8:
		return TypeByte, true
	case int16:
		return TypeInt16, true
	case uint16:
		return TypeUInt16, true
	case int32:
		return TypeInt32, true
	case uint32:
		return TypeUInt32, true
	case int64:
		return TypeInt64, true
	case uint64:
		return TypeUInt64, true
	case float32:
		return TypeFloat, true
	case float64:
		return TypeDouble, true
	case string:
		return TypeString, true
	case time.Time:
		return TypeDateTime, true
	case []byte:
		return TypeByteString, true
	case []bool:
		return TypeBoolean + "[]", true
	case []int8:
		return TypeSByte + "[]", true
	case []int16:
		return TypeInt16 + "[]", true
	case []uint16:
		return TypeUInt16 + "[]", true
	case []int32:
		return TypeInt32 + "[]", true
	case []uint32:
		return TypeUInt32 + "[]", true
	case []int64:
		return TypeInt64 + "[]", true
	case []uint64:
		return TypeUInt64 + "[]", true
	case []float32:
		return TypeFloat + "[]", true
	case []float64:
		return TypeDouble + "[]", true
	case []string:
		return TypeString + "[]", true
	case []time.Time:
		return TypeDateTime + "[]", true
	}
	return "", false
}

// Update is one change of one tag, as a source reports it and as the relay
// publishes it.
type Update struct {
	// Tag is the tag's configured name.
	Tag string
	// Value is the value, one of the Go types listed with the Type
	// constants; nil when the source has none.
	Value any
	// Status is the source's status code for the value.
	Status StatusCode
	// SourceTime is when the value was sampled at its origin; ServerTime
	// when the source server last touched it. Either may be zero.
	SourceTime time.Time
	ServerTime time.Time
	// Seq numbers the updates the relay published for this tag, from 1,
	// so a consumer can detect a gap. Sources leave it zero.
	Seq uint64
	// Err says why the value could not be carried (an unsupported type),
	// with Status then Bad. Empty otherwise.
	Err string
}

// Unsupported returns the Update for a value whose type the relay cannot
// carry: Bad (BadTypeMismatch), no value, and a reason naming the type, so
// that it is reported rather than silently turned into a zero.
func Unsupported(tag string, v any, src, srv time.Time) Update {
	return Update{
		Tag:        tag,
		Status:     StatusBadTypeMismatch,
		SourceTime: src,
		ServerTime: srv,
		Err:        fmt.Sprintf("unsupported value type %T", v),
	}
}
