package uaclient

import (
	"errors"
	"fmt"

	"github.com/gopcua/opcua/ua"
)

// DataChangeFilter is when a server reports a monitored value (OPC UA
// Part 4, DataChangeFilter): on a change of its status, its status or
// value (the default), or also of its source timestamp; and, for numeric
// values, only past a deadband, absolute or in percent of the node's
// EURange. A server may refuse a filter for a node (a deadband on a
// string, a percent deadband without an EURange); the item then fails
// with the server's status.
type DataChangeFilter struct {
	// Trigger is status, statusValue (default) or statusValueTimestamp.
	Trigger string `json:"trigger,omitempty" yaml:"trigger,omitempty"`
	// DeadbandType is none (default), absolute or percent.
	DeadbandType string `json:"deadbandType,omitempty" yaml:"deadbandType,omitempty"`
	// DeadbandValue is the deadband: in the value's units (absolute, at
	// least 0) or in percent of the EURange (0-100).
	DeadbandValue float64 `json:"deadbandValue,omitempty" yaml:"deadbandValue,omitempty"`
}

var (
	triggers = map[string]ua.DataChangeTrigger{
		"status":               ua.DataChangeTriggerStatus,
		"statusValue":          ua.DataChangeTriggerStatusValue,
		"statusValueTimestamp": ua.DataChangeTriggerStatusValueTimestamp,
	}
	deadbands = map[string]ua.DeadbandType{
		"none":     ua.DeadbandTypeNone,
		"absolute": ua.DeadbandTypeAbsolute,
		"percent":  ua.DeadbandTypePercent,
	}
)

// Validate reports every invalid field of f, each prefixed with field
// (the path in the config, e.g. "filter").
func (f DataChangeFilter) Validate(field string) error {
	var errs []error
	if _, ok := triggers[f.Trigger]; f.Trigger != "" && !ok {
		errs = append(errs, &ValueError{Field: field + ".trigger", Value: f.Trigger,
			Reason: fmt.Sprintf("%q is not valid (valid: status, statusValue, statusValueTimestamp)", f.Trigger)})
	}
	switch f.DeadbandType {
	case "", "none":
		if f.DeadbandValue != 0 {
			errs = append(errs, &ValueError{Field: field + ".deadbandValue", Value: fmt.Sprint(f.DeadbandValue),
				Reason: "set without a deadbandType (valid: absolute, percent)"})
		}
	case "absolute":
		if f.DeadbandValue < 0 {
			errs = append(errs, &ValueError{Field: field + ".deadbandValue", Value: fmt.Sprint(f.DeadbandValue),
				Reason: fmt.Sprintf("%v is out of range (valid: 0 or more, in the value's units)", f.DeadbandValue)})
		}
	case "percent":
		if f.DeadbandValue < 0 || f.DeadbandValue > 100 {
			errs = append(errs, &ValueError{Field: field + ".deadbandValue", Value: fmt.Sprint(f.DeadbandValue),
				Reason: fmt.Sprintf("%v is out of range (valid 0-100, percent of the node's EURange)", f.DeadbandValue)})
		}
	default:
		errs = append(errs, &ValueError{Field: field + ".deadbandType", Value: f.DeadbandType,
			Reason: fmt.Sprintf("%q is not valid (valid: none, absolute, percent)", f.DeadbandType)})
	}
	return errors.Join(errs...)
}

// encode returns the filter as a monitored item carries it: nil (no
// filter, the server's default) for the defaults.
func (f *DataChangeFilter) encode() *ua.ExtensionObject {
	if f == nil || (f.Trigger == "" || f.Trigger == "statusValue") && (f.DeadbandType == "" || f.DeadbandType == "none") {
		return ua.NewExtensionObject(nil)
	}
	trigger, ok := triggers[f.Trigger]
	if !ok {
		trigger = ua.DataChangeTriggerStatusValue
	}
	return ua.NewExtensionObject(&ua.DataChangeFilter{
		Trigger:       trigger,
		DeadbandType:  uint32(deadbands[f.DeadbandType]),
		DeadbandValue: f.DeadbandValue,
	})
}

func (f *DataChangeFilter) same(g *DataChangeFilter) bool {
	if f == nil || g == nil {
		return f == g
	}
	return *f == *g
}
