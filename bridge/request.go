package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// decodeRequest decodes one JSON object, the body of a service request,
// into v. Besides what encoding/json refuses, a key given twice in an
// object, at any depth, is an error that names it, as are unknown fields
// and data after the object: encoding/json would keep the last of two
// keys silently, so {"value":"x","value":5} would write 5.
func decodeRequest(d []byte, v any) error {
	if err := duplicateKey(d); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(d))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// encoding/json quotes an unknown field whole: a key of 900 KiB
		// made an error too large to reply with.
		return errors.New(truncate(err.Error(), maxDecodeError))
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}

// maxDecodeError bounds encoding/json's error in a reply.
const maxDecodeError = 256

// maxKeyInError bounds a key quoted in an error: the client chose it.
const maxKeyInError = 64

// duplicateKey returns an error naming the first key that occurs twice in
// one object of the JSON value d, and where the object is; nil if there is
// none, or if d is not JSON (the decoder that follows says why). Keys are
// compared as encoding/json matches them to fields, without regard to case,
// so "value" and "Value" are the same key.
func duplicateKey(d []byte) error {
	type frame struct {
		object bool
		keys   map[string]string // folded key -> the key as written
		key    string            // the object's current key
		index  int               // the array's current index
		path   string            // where the container is, "" at the top
	}
	dec := json.NewDecoder(bytes.NewReader(d))
	// Numbers stay text: a number too large for a float64 is not this
	// pass's business.
	dec.UseNumber()
	var stack []*frame
	// child is the path of the value that starts now in the top frame.
	child := func() string {
		top := stack[len(stack)-1]
		if top.object {
			if top.path == "" {
				return top.key
			}
			return top.path + "." + top.key
		}
		return top.path + "[" + strconv.Itoa(top.index) + "]"
	}
	// done ends a value in the top frame: an object expects a key next, an
	// array its next element.
	expectKey := false
	done := func() {
		if len(stack) == 0 {
			return
		}
		if top := stack[len(stack)-1]; top.object {
			expectKey = true
		} else {
			top.index++
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				path := ""
				if len(stack) > 0 {
					path = child()
				}
				f := &frame{object: t == '{', path: path}
				if f.object {
					f.keys = map[string]string{}
				}
				stack = append(stack, f)
				expectKey = f.object
				continue
			default:
				stack = stack[:len(stack)-1]
				done()
			}
		case string:
			if len(stack) > 0 && expectKey {
				top := stack[len(stack)-1]
				fk := foldKey(t)
				if prev, dup := top.keys[fk]; dup {
					return duplicateKeyError(prev, t, top.path)
				}
				top.keys[fk] = t
				top.key = t
				expectKey = false
				continue
			}
			done()
		default:
			done()
		}
		if len(stack) == 0 {
			// The first value is complete; what follows is the
			// decoder's to refuse.
			return nil
		}
	}
}

func duplicateKeyError(prev, key, path string) error {
	where := ""
	if path != "" {
		where = " in " + strconv.Quote(truncate(path, maxKeyInError))
	}
	if prev == key {
		return fmt.Errorf("duplicate key %q%s: give each key once", truncate(key, maxKeyInError), where)
	}
	return fmt.Errorf("duplicate key %q%s: the same as %q (keys are matched without regard to case); give each key once",
		truncate(key, maxKeyInError), where, truncate(prev, maxKeyInError))
}

// foldKey maps the keys that encoding/json takes for the same field to
// one string: every rune to the smallest of its case-folding orbit, as
// encoding/json's own folding does.
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		for {
			f := unicode.SimpleFold(r)
			if f <= r {
				r = f
				break
			}
			r = f
		}
		b.WriteRune(r)
	}
	return b.String()
}
