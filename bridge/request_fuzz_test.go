package bridge

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/apbridge/apbridge/wire"
)

// maxReplyError bounds the error of any refused request: with the value
// never repeated and the client's strings cut, it fits in a reply.
const maxReplyError = 2048

// withKeyTwice returns the JSON object d with one of its top-level keys
// given a second time, first, in another case when it has a letter; ok is
// false when d is not an object with a key.
func withKeyTwice(d []byte) (out []byte, key string, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(d, &m) != nil || len(m) == 0 {
		return nil, "", false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	key = keys[0]
	twin := []rune(key)
	for i, r := range twin {
		if unicode.IsLower(r) {
			twin[i] = unicode.ToUpper(r)
			break
		}
	}
	k, _ := json.Marshal(string(twin))
	i := bytes.IndexByte(d, '{')
	out = append(append(append(append([]byte{}, d[:i+1]...), k...), ':'), m[key]...)
	return append(append(out, ','), d[i+1:]...), key, true
}

// FuzzDecodeWrite: any write request body and any known tag type is
// decoded or refused without a panic, the error short enough for a reply.
// What is accepted is written with the tag's type when it has one,
// whatever the request says, and an accepted object with one of its keys
// given twice (in any case) is refused as a duplicate.
func FuzzDecodeWrite(f *testing.F) {
	for _, s := range []struct{ body, known string }{
		{`{"value":42}`, "Int64"},
		{`43`, "Int64"},
		{`{"value":"44","type":"Int64"}`, "Int64"},
		{`{"value":"x","value":5}`, "Int64"},
		{`{"value":5,"Value":6}`, "Int64"},
		{`{"type":"Int64","value":5,"type":"String"}`, "Int64"},
		{`{"value":[{"a":1,"a":2}],"type":"Int64[]"}`, ""},
		{`{"value":"abc","type":"String"}`, "Int64"},
		{`{"value":5,"type":"Double"}`, "Int64"},
		{`{"value":["5"],"type":"Int64[]"}`, "Int64"},
		{`{"value":"abc","type":"String"}`, ""},
		{`{"value":[1.5,"NaN"],"type":"Double[]"}`, "Double[]"},
		{`{"value":"AAE=","type":"ByteString"}`, "Null"},
		{`{"value":1,"` + strings.Repeat("k", 4096) + `":2}`, "Int64"},
		{`{"value":1,"type":"` + strings.Repeat("t", 4096) + `"}`, "Int64"},
		// A type quoted in an error grows with each rune %q escapes.
		{`{"value":2}`, "In" + strings.Repeat("\n", 3000)},
		{`{"value": 4`, "Int64"},
		{`{"valu": 1}`, "Int64"},
		{`hello`, "String"},
		{``, "Int64"},
	} {
		f.Add([]byte(s.body), s.known)
	}
	f.Fuzz(func(t *testing.T, data []byte, known string) {
		typ, raw, _, err := decodeWrite(data, wire.Type(known))
		if err != nil {
			if len(err.Error()) > maxReplyError {
				t.Fatalf("an error of %d bytes: %.200s", len(err.Error()), err)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted a value that is not JSON: %q", raw)
		}
		if known != "" && known != string(wire.TypeNull) && typ != wire.Type(known) {
			t.Fatalf("%q: written as %s to a tag of type %s", data, typ, known)
		}
		twice, key, ok := withKeyTwice(data)
		if !ok {
			return
		}
		if _, _, _, err := decodeWrite(twice, wire.Type(known)); err == nil || !strings.Contains(err.Error(), "duplicate key") {
			t.Fatalf("%q with %q twice: %v, want a duplicate key", twice, key, err)
		}
	})
}

// FuzzSnapshotRequest: any snapshot request body is answered or refused
// without a panic, the error short enough for a reply. What is accepted
// has a limit within the page size, a prefix without a wildcard, and no
// cursor or one the request's source and prefix select; an accepted object
// with one of its keys given twice (in any case) is refused as a
// duplicate.
func FuzzSnapshotRequest(f *testing.F) {
	tags := map[string]string{"apbridge.a.T1": "a", "apbridge.a.T2": "a", "apbridge.b.T1": "b"}
	sc := snapshotScope{page: 500, sources: []string{"a", "b"}, sourceOf: func(s string) (string, bool) {
		src, ok := tags[s]
		return src, ok
	}}
	for _, s := range []string{
		``, `{}`, `{"source":"a","prefix":"apbridge.a.","after":"apbridge.a.T1","limit":500}`,
		`{"limit":501}`, `{"limit":-1}`, `{"limit":1,"limit":600}`, `{"source":"a","Source":"b"}`,
		`{"after":"garbage"}`, `{"source":"a","after":"apbridge.b.T1"}`, `{"prefix":"apbridge.a.","after":"apbridge.b.T1"}`,
		`{"prefix":"apbridge.*"}`, `{"prefix":"apbridge.>"}`, `{"prefix":"apbridge.a*"}`, `{"prefix":"apbridge. a"}`,
		`{"prefix":"apbridge..a"}`, `{"prefix":"nothing."}`, `{"source":"c"}`, `{"sorce":"a"}`, `{"limit":1} {"limit":2}`, `[1]`,
		`{"prefix":"` + strings.Repeat("p", 4096) + `*"}`, `{"source":"` + strings.Repeat("s", 4096) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeSnapshotRequest(data)
		if err == nil {
			_, err = checkSnapshotRequest(r, sc)
		}
		if err != nil {
			if len(err.Error()) > maxReplyError {
				t.Fatalf("an error of %d bytes: %.200s", len(err.Error()), err)
			}
			return
		}
		if r.Limit < 0 || r.Limit > sc.page {
			t.Fatalf("%q: accepted limit %d (page %d)", data, r.Limit, sc.page)
		}
		if strings.ContainsAny(r.Prefix, "*>") || strings.ContainsFunc(r.Prefix, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
			t.Fatalf("%q: accepted prefix %q", data, r.Prefix)
		}
		if r.After != "" {
			src, ok := tags[r.After]
			if !ok || r.Source != "" && src != r.Source || !strings.HasPrefix(r.After, r.Prefix) {
				t.Fatalf("%q: accepted the cursor %q, which no page of this request ends with", data, r.After)
			}
		}
		twice, key, ok := withKeyTwice(bytes.TrimSpace(data))
		if !ok {
			return
		}
		if _, err := decodeSnapshotRequest(twice); err == nil || !strings.Contains(err.Error(), "duplicate key") {
			t.Fatalf("%q with %q twice: %v, want a duplicate key", twice, key, err)
		}
	})
}
