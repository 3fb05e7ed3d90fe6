package wire

import "strings"

// ReservedSpace is a subject space that NATS itself serves or uses. A
// message published there is not data: on "$JS.API.STREAM.DELETE.<name>"
// it is a request that deletes a stream, on "$KV.<bucket>.<key>" a write to
// a bucket, on an "_INBOX." subject a reply to another client's request. A
// relay must never publish tag updates, serve its services or store a
// stream in one.
type ReservedSpace struct {
	// Pattern is the space as a subject pattern, e.g. "$JS.API.>".
	Pattern string
	// Use says what NATS uses the space for, for error messages.
	Use string
}

// String returns the space as an error message shows it: its pattern and
// its use.
func (r ReservedSpace) String() string { return `"` + r.Pattern + `" (` + r.Use + `)` }

// reservedSpaces are the named reserved spaces, most specific first, so
// that a subject is reported under the space that says most about it.
// Beyond them every subject whose first token starts with '$' is reserved
// (NATS keeps those for itself: the spaces below all start so, and new
// ones do); "_INBOX.>" is the one outside '$' (the default reply prefix of
// every NATS client). "$SRV.>" is among the relay's own service subjects
// too (ServiceSubjects), and the relay reports a tag there as overlapping
// its services.
var reservedSpaces = []ReservedSpace{
	{"$JS.API.>", "the JetStream API: a message there is a request to JetStream, such as deleting a stream"},
	{"$JS.>", "JetStream's acknowledgements, flow control and advisories"},
	{"$JSC.>", "JetStream's cluster-internal traffic"},
	{"$NRG.>", "the Raft groups that replicate JetStream"},
	{"$SYS.>", "the system account: server events and requests"},
	{"$KV.>", "JetStream key-value buckets: a message there is a write to a bucket"},
	{"$O.>", "JetStream object stores: a message there is a write to a store"},
	{"$MQTT.>", "the MQTT gateway's sessions and retained messages"},
	{"$SRV.>", "the discovery of NATS micro services: a message there is a PING, INFO or STATS request to every service"},
	{"_INBOX.>", "reply subjects: a message there is a reply to another client's request"},
}

// dollarUse is the use of the spaces beyond the named ones.
const dollarUse = "NATS reserves every subject whose first token starts with $ for its own use"

var reservedToks = func() [][]ptok {
	out := make([][]ptok, len(reservedSpaces))
	for i, r := range reservedSpaces {
		out[i] = patternTokens(r.Pattern)
	}
	return out
}()

// Reserved reports whether s, a subject or a subject pattern, is in a
// reserved space or, for a pattern, could match a subject in one, and
// which space: "$JS.API.STREAM.DELETE.X" is in "$JS.API.>", the pattern
// ">" matches subjects in all of them.
func Reserved(s string) (ReservedSpace, bool) { return Tokenize(s).Reserved() }

// Reserved is the package's Reserved of a tokenized subject or pattern.
func (t Tokens) Reserved() (ReservedSpace, bool) { return reservedOf(t.toks, t.linear) }

// CanBeReserved reports whether the template can give some tag of source a
// subject in a reserved space, whatever the tag's name and address, and
// which space: "{tag}" can ("$JS.API.STREAM.DELETE.X" is a tag name),
// "plant.{source}.{tag}" cannot. The relay refuses such a template for a
// source whose tags are found by browsing, as it cannot check the names
// before it has them.
func (m *Mapper) CanBeReserved(source string) (ReservedSpace, bool) {
	return reservedIn(m.tokens(source))
}

// Reserved reports whether every subject the template gives lies in a
// reserved space, whatever the source and tag, and which space: true for
// "$KV.plant.{source}.{tag}", false for "{tag}" (most tag names give a
// subject outside every reserved space).
func (m *Mapper) Reserved() (ReservedSpace, bool) {
	// The literal text before the first placeholder is what every
	// subject starts with; its tokens before the last '.' are whole.
	rest := ""
	for _, p := range m.parts {
		if p.ph != "" {
			break
		}
		rest += p.literal
	}
	toks := strings.Split(rest, ".")
	if lead := toks[:len(toks)-1]; len(lead) > 0 {
		within := patternTokens(strings.Join(lead, ".") + ".>")
		for i, rt := range reservedToks {
			if subset(within, rt) {
				return reservedSpaces[i], true
			}
		}
	}
	if strings.HasPrefix(rest, "$") {
		first := toks[0]
		if len(toks) == 1 {
			first += "*" // a placeholder completes the first token
		}
		return ReservedSpace{Pattern: first + ".>", Use: dollarUse}, true
	}
	return ReservedSpace{}, false
}

// reservedIn is Reserved for subjects given as pattern tokens, literal or
// partly placeholders (Mapper.tokens).
func reservedIn(toks []ptok) (ReservedSpace, bool) { return reservedOf(toks, manyOnlyLast(toks)) }

// reservedOf is reservedIn; linear is manyOnlyLast(toks). Every reserved
// space is a pattern whose only "many" is its last.
func reservedOf(toks []ptok, linear bool) (ReservedSpace, bool) {
	for i, rt := range reservedToks {
		if overlapOf(toks, rt, linear) {
			return reservedSpaces[i], true
		}
	}
	if len(toks) == 0 {
		return ReservedSpace{}, false
	}
	switch first := toks[0]; {
	case first.kind == tokLiteral && strings.HasPrefix(first.pre, "$"):
		return ReservedSpace{Pattern: first.pre + ".>", Use: dollarUse}, true
	case first.kind != tokLiteral && (first.pre == "" || strings.HasPrefix(first.pre, "$")):
		// A wildcard, or a placeholder that escaping leaves a '$' in
		// ("*" in the pattern shown: whatever completes the token).
		pattern := first.pre + "*"
		if first.pre == "" {
			pattern = "$*"
		}
		return ReservedSpace{Pattern: pattern + ".>", Use: dollarUse}, true
	}
	return ReservedSpace{}, false
}
