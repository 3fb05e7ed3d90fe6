package wire

import "strings"

// Patterns are NATS subject patterns ("*" matches one token, ">" one or
// more and only as the last token), tokenized once to check many subjects
// against them: at 10,000 tags, tokenizing the service subjects again for
// every tag made 19 MB of garbage at startup, and the heap it grew stayed
// resident. Its methods answer the two questions the relay asks of
// subjects: does a subject overlap a pattern (could one message match
// both), and is it within one (does the pattern match everything it
// matches).
type Patterns struct {
	list   []string
	toks   [][]ptok
	linear []bool // manyOnlyLast of each
}

// NewPatterns tokenizes list; the methods try its patterns in its order.
func NewPatterns(list ...string) Patterns {
	ps := Patterns{list: list, toks: make([][]ptok, len(list)), linear: make([]bool, len(list))}
	for i, p := range list {
		ps.toks[i] = patternTokens(p)
		ps.linear[i] = manyOnlyLast(ps.toks[i])
	}
	return ps
}

// Tokens is a subject or a pattern split into its tokens once, for
// several checks: a config check asks of every tag's subject whether it
// is reserved (Reserved) and whether it overlaps a service subject
// (Patterns.OverlappingTokens).
type Tokens struct {
	toks   []ptok
	linear bool
}

// Tokenize splits s, a subject or a pattern, into its tokens.
func Tokenize(s string) Tokens {
	t := patternTokens(s)
	return Tokens{toks: t, linear: manyOnlyLast(t)}
}

// Overlapping returns the first of the patterns that some subject matched
// by s (a subject or a pattern) matches too, and false when none does.
func (ps Patterns) Overlapping(s string) (string, bool) { return ps.OverlappingTokens(Tokenize(s)) }

// OverlappingTokens is Overlapping of a tokenized subject or pattern.
func (ps Patterns) OverlappingTokens(t Tokens) (string, bool) {
	for i, pt := range ps.toks {
		if overlapOf(t.toks, pt, t.linear && ps.linear[i]) {
			return ps.list[i], true
		}
	}
	return "", false
}

// Covering returns the first of the patterns that matches every subject s
// (a subject or a pattern) matches, and false when none does.
func (ps Patterns) Covering(s string) (string, bool) {
	st := patternTokens(s)
	for i, pt := range ps.toks {
		if subset(st, pt) {
			return ps.list[i], true
		}
	}
	return "", false
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
	// One allocation: the relay tokenizes every tag's subject at least
	// twice (reserved spaces, service subjects) when it validates a
	// config, and a change re-validates all of them.
	out := make([]ptok, 0, strings.Count(s, ".")+1)
	for {
		i := strings.IndexByte(s, '.')
		p := s
		if i >= 0 {
			p = s[:i]
		}
		switch p {
		case "*":
			out = append(out, ptok{kind: tokOne})
		case ">":
			out = append(out, ptok{kind: tokMany})
		default:
			out = append(out, ptok{pre: p})
		}
		if i < 0 {
			return out
		}
		s = s[i+1:]
	}
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
func overlap(a, b []ptok) bool { return overlapOf(a, b, manyOnlyLast(a) && manyOnlyLast(b)) }

// overlapOf is overlap; linear says that neither a nor b has a "many"
// token but as its last (manyOnlyLast), which the caller may know.
func overlapOf(a, b []ptok, linear bool) bool {
	if linear {
		return overlapLinear(a, b)
	}
	return overlapSearch(a, b)
}

// overlapSearch is overlap of any sequences: a search over the positions
// of both, each tried once.
func overlapSearch(a, b []ptok) bool {
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

// manyOnlyLast reports whether toks has no "many" token but, maybe, its
// last: every subject and every valid pattern.
func manyOnlyLast(toks []ptok) bool {
	for _, t := range toks[:max(len(toks)-1, 0)] {
		if t.kind == tokMany {
			return false
		}
	}
	return true
}

// overlapLinear is overlap of sequences whose only "many" token, if any,
// is their last: token by token, without the search (and its memo) that
// a "many" inside a template's tokens needs. A config check calls it for
// every tag against every service subject and reserved space.
func overlapLinear(a, b []ptok) bool {
	for i := range a {
		switch {
		case i == len(b):
			return false
		case a[i].kind == tokMany || b[i].kind == tokMany:
			// The "many" takes the rest of the other, one token or more.
			return true
		case !tokensMeet(a[i], b[i]):
			return false
		}
	}
	return len(a) == len(b)
}

// subset reports whether b matches every subject a matches. Both are
// subject patterns as patternTokens makes them: a "one" token has no
// literal part there, and a "many" comes last.
func subset(a, b []ptok) bool {
	for j, y := range b {
		if y.kind == tokMany {
			return j < len(a)
		}
		if j == len(a) {
			return false
		}
		switch x := a[j]; {
		case x.kind == tokMany:
			return false
		case y.kind == tokOne:
		case x.kind == tokOne || x.pre != y.pre:
			return false
		}
	}
	return len(a) == len(b)
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
