package bridge

import (
	"fmt"
	"strings"
)

// ServiceSubjects returns the subjects the bridge's own services listen
// on for prefix: <prefix>.status, .snapshot, .write.> and .events.>, and
// the micro service's $SRV.>. A tag subject, a subject template's result
// or a stream subject must not overlap any of them: the relay's own
// updates would arrive as requests, and with a writable tag as writes.
func ServiceSubjects(prefix string) []string {
	return []string{prefix + ".status", prefix + ".snapshot", prefix + ".write.>", prefix + ".events.>", "$SRV.>"}
}

// SubjectsOverlap reports whether some subject matches both a and b,
// subjects that may hold the wildcards "*" and ">".
func SubjectsOverlap(a, b string) bool {
	return overlap(patternTokens(a), patternTokens(b))
}

// CanOverlap reports whether a tag of source could be published on a
// subject that pattern (which may hold wildcards) matches, whatever the
// tag's name and address. It errs on the side of yes where a
// placeholder shares a token with literal text.
func (m *Mapper) CanOverlap(source, pattern string) bool {
	return overlap(m.tokens(source), patternTokens(pattern))
}

// ptok is one token of a subject pattern: a literal, one token starting
// with pre and ending with suf (at least one byte between), or one or
// more tokens of any kind.
type ptok struct {
	kind     tokKind
	pre, suf string
}

type tokKind uint8

const (
	tokLiteral tokKind = iota // pre is the token
	tokOne                    // one token, pre...suf
	tokMany                   // one or more tokens
)

func patternTokens(s string) []ptok {
	parts := strings.Split(s, ".")
	out := make([]ptok, len(parts))
	for i, p := range parts {
		switch p {
		case "*":
			out[i] = ptok{kind: tokOne}
		case ">":
			out[i] = ptok{kind: tokMany}
		default:
			out[i] = ptok{pre: p}
		}
	}
	return out
}

// SourcePattern returns a subject pattern that every subject the template
// gives a tag of source matches: the template's leading tokens that hold no
// tag placeholder, then ">". A stream that captures it captures every tag
// the source may be given later.
func (m *Mapper) SourcePattern(source string) string {
	var toks []string
	for _, t := range m.tokens(source) {
		if t.kind != tokLiteral {
			break
		}
		toks = append(toks, t.pre)
	}
	return strings.Join(append(toks, ">"), ".")
}

// tokens returns the template's subjects for source as pattern tokens:
// {tag} is one or more tokens, {tagid} and {address} part of one.
func (m *Mapper) tokens(source string) []ptok {
	var out []ptok
	cur := ptok{}
	lit := func(s string) {
		for i := 0; i < len(s); i++ {
			switch {
			case s[i] == '.':
				out = append(out, cur)
				cur = ptok{}
			case cur.kind == tokLiteral:
				cur.pre += s[i : i+1]
			default:
				cur.suf += s[i : i+1]
			}
		}
	}
	for _, p := range m.parts {
		switch p.ph {
		case "":
			lit(p.literal)
		case "source":
			lit(EscapeToken(source))
		case "tag":
			cur = ptok{kind: tokMany}
		default:
			if cur.kind == tokLiteral {
				cur.kind = tokOne
			}
			cur.suf = ""
		}
	}
	return append(out, cur)
}

// overlap reports whether one token sequence matches both a and b.
func overlap(a, b []ptok) bool {
	type pos struct{ i, j int }
	seen := map[pos]bool{}
	var rec func(i, j int) bool
	rec = func(i, j int) bool {
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if seen[pos{i, j}] {
			return false
		}
		seen[pos{i, j}] = true
		if !tokensMeet(a[i], b[j]) {
			return false
		}
		// Both give one token; a "many" may give more.
		if rec(i+1, j+1) {
			return true
		}
		if a[i].kind == tokMany && rec(i, j+1) {
			return true
		}
		return b[j].kind == tokMany && rec(i+1, j)
	}
	return rec(0, 0)
}

// tokensMeet reports whether one token can match both a and b.
func tokensMeet(a, b ptok) bool {
	if a.kind == tokMany || b.kind == tokMany {
		return true
	}
	if a.kind == tokLiteral && b.kind == tokLiteral {
		return a.pre == b.pre
	}
	if b.kind == tokLiteral {
		a, b = b, a
	}
	if a.kind == tokLiteral {
		t := a.pre
		return len(t) > len(b.pre)+len(b.suf) && strings.HasPrefix(t, b.pre) && strings.HasSuffix(t, b.suf)
	}
	return true
}

// ValidateServiceName checks a micro service name: 1-64 letters, digits,
// '-' and '_', which is what the NATS micro protocol accepts.
func ValidateServiceName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("service name %q: want 1-64 characters", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("service name %q: %q is not allowed (valid: letters, digits, - and _)", name, c)
		}
	}
	return nil
}
