package bridge

import (
	"strings"
	"testing"
)

// TestDuplicateKey: a key twice in one object, at any depth and in any
// case encoding/json would match, is named with where it is; the same key
// in two objects is not a duplicate.
func TestDuplicateKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"value":"x","value":5}`, `duplicate key "value": give each key once`},
		{`{"value":5,"Value":6}`, `duplicate key "Value": the same as "value"`},
		// U+017F (long s) and U+212A (Kelvin) fold to s and k, and
		// encoding/json matches them so.
		{`{"source":"a","ſource":"b"}`, `duplicate key "ſource": the same as "source"`},
		{`{"limit":1,"limit":2}`, `duplicate key "limit"`},
		{`{"value":[1,2],"value":3}`, `duplicate key "value"`},
		{`{"value":{"a":1,"a":2}}`, `duplicate key "a" in "value"`},
		{`{"value":[0,{"a":{"b":1,"b":2}}]}`, `duplicate key "b" in "value[1].a"`},
		{`[{"a":1,"a":2}]`, `duplicate key "a" in "[0]"`},
		{`{"` + strings.Repeat("k", 500) + `":1,"` + strings.Repeat("k", 500) + `":2}`, `duplicate key "` + strings.Repeat("k", 64) + `…"`},
	} {
		err := duplicateKey([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.80s: %v, want %q", c.in, err, c.want)
		}
	}
	for _, in := range []string{
		`{"value":5,"type":"Int64"}`,
		`{"a":{"x":1},"b":{"x":1}}`,
		`[{"a":1},{"a":1}]`,
		`{"value":["value","value"]}`,
		`{"a":[],"b":{},"c":[[]]}`,
		`5`, `"value"`, `{}`, ``,
		`{"value":1e400}`,
		// Not JSON, or a duplicate only past the first value: the strict
		// decoder refuses those with its own words.
		`{"value":`, `{"value":1}{"value":2}`, `{"value" 1, "value": 2}`,
	} {
		if err := duplicateKey([]byte(in)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
}
