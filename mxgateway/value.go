package mxgateway

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ToValue turns a Go value into an MXAccess variant: bool, int32, int64,
// float32, float64, string and time.Time are carried as they are; int8,
// int16, uint8 and uint16 widen to int32, uint32 to int64.
func ToValue(v any) (*mxpb.MxValue, error) {
	switch x := v.(type) {
	case bool:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_BoolValue{BoolValue: x}}, nil
	case int8:
		return int32Value(int32(x)), nil
	case int16:
		return int32Value(int32(x)), nil
	case uint8:
		return int32Value(int32(x)), nil
	case uint16:
		return int32Value(int32(x)), nil
	case int32:
		return int32Value(x), nil
	case uint32:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_Int64Value{Int64Value: int64(x)}}, nil
	case int64:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_Int64Value{Int64Value: x}}, nil
	case float32:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_FloatValue{FloatValue: x}}, nil
	case float64:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_DoubleValue{DoubleValue: x}}, nil
	case string:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_StringValue{StringValue: x}}, nil
	case time.Time:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_TimeValue{TimeValue: timestamppb.New(x)}}, nil
	}
	return nil, fmt.Errorf("mxgateway: a %T cannot be written (valid: bool, integers up to 32 bits, int64, float32, float64, string, time.Time)", v)
}

func int32Value(x int32) *mxpb.MxValue {
	return &mxpb.MxValue{Kind: &mxpb.MxValue_Int32Value{Int32Value: x}}
}

// FromValue returns the Go value of an MXAccess variant; nil for an empty
// one.
func FromValue(v *mxpb.MxValue) any {
	switch x := v.GetKind().(type) {
	case *mxpb.MxValue_BoolValue:
		return x.BoolValue
	case *mxpb.MxValue_Int32Value:
		return x.Int32Value
	case *mxpb.MxValue_Int64Value:
		return x.Int64Value
	case *mxpb.MxValue_FloatValue:
		return x.FloatValue
	case *mxpb.MxValue_DoubleValue:
		return x.DoubleValue
	case *mxpb.MxValue_StringValue:
		return x.StringValue
	case *mxpb.MxValue_TimeValue:
		return asTime(x.TimeValue)
	}
	return nil
}

// OPC DA qualities as MXAccess reports them.
const (
	QualityGood int32 = 0xC0
	// QualityUncertain is the lowest uncertain quality; 64-191 is
	// uncertain.
	QualityUncertain int32 = 0x40
	// QualityBad is plain bad; every quality below 64 is bad, its low
	// bits say why.
	QualityBad int32 = 0x00
)

// asTime is t as a time.Time; the zero time for a missing one, not 1970.
func asTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}
