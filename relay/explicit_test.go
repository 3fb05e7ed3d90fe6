package relay

import (
	"reflect"
	"strings"
	"testing"
)

// TestZeroRulesNameFields keeps zeroRules true to the config's types: every
// rule is the path of a field (a renamed field would leave its rule
// checking nothing), and its kind fits the field's type.
func TestZeroRulesNameFields(t *testing.T) {
	kinds := map[reflect.Kind]zeroKind{reflect.String: zeroString, reflect.Int: zeroInt, reflect.Int32: zeroInt,
		reflect.Int64: zeroDuration, reflect.Uint64: zeroInt, reflect.Slice: zeroList}
	for path, r := range zeroRules {
		srcTypes := []reflect.Type{reflect.TypeOf(opcuaSourceYAML{}), reflect.TypeOf(mxGatewaySourceYAML{})}
		switch {
		case r.only == TypeMxGateway:
			srcTypes = srcTypes[1:]
		case !strings.HasPrefix(path, "sources[]"):
			srcTypes = srcTypes[:1] // not a source's field: one pass
		}
		found := false
		for _, st := range srcTypes {
			ft, ok := fieldType(reflect.TypeOf(Config{}), path, st)
			if !ok {
				continue
			}
			found = true
			k := ft.Kind()
			if k == reflect.Int64 && ft != durationType {
				k = reflect.Int
			}
			if want, ok := kinds[k]; !ok || want != r.kind {
				t.Errorf("%s: a %v field with a rule of kind %d", path, ft, r.kind)
			}
		}
		if !found {
			t.Errorf("%s: no such field", path)
		}
		if r.valid == "" || r.def == "" {
			t.Errorf("%s: the rule says nothing of the valid values or the default", path)
		}
	}
}

// fieldType resolves a rule's path (sources[].tags[].subject) against t;
// src is the type a source decodes into.
func fieldType(t reflect.Type, path string, src reflect.Type) (reflect.Type, bool) {
	for _, name := range strings.Split(path, ".") {
		list := strings.HasSuffix(name, "[]")
		name = strings.TrimSuffix(name, "[]")
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		ft, ok := yamlFields(t)[name]
		if !ok {
			return nil, false
		}
		t = ft
		if list {
			t = t.Elem()
		}
		if t == sourceConfigType {
			t = src
		}
	}
	return t, true
}

// TestWrittenValuesAccepted is the positive control of the zero rules: a
// file that writes those fields with values of their own is accepted, and
// takes them.
func TestWrittenValuesAccepted(t *testing.T) {
	cfg := edit("instance: site-a", `instance: site-a
logLevel: debug
subject: 'plant.{source}.{tag}'
sink: jetstream
jetstream: {stream: PLANT, subjects: ['plant.>'], replicas: 1, storage: memory, duplicateWindow: 1m, maxPending: 10}
service: {prefix: plant-svc, name: plant}
subscribe: {retryFloor: 1s, retryCeiling: 10s, inFlightCeiling: 20s}
fleet: {relayId: relay-a, bucket: plant_fleet, leaseTTL: 2s, replicas: 1, dwell: 1s, overlap: -1s}`)
	cfg = strings.Replace(cfg, "nats:\n", "nats:\n  name: plant-relay-a\n", 1)
	cfg = strings.Replace(cfg, "writable: true}", "writable: true, subject: plant.setpoints.sp}", 1)
	cfg = strings.Replace(cfg, "    tags:\n", "    mode: hot\n    tags:\n", 1)
	c, err := Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if c.Fleet.LeaseTTL.String() != "2s" || c.Fleet.Overlap >= 0 || c.Service.Prefix != "plant-svc" || c.JetStream.Replicas != 1 {
		t.Fatalf("the written values were not taken: %+v", c)
	}
}
