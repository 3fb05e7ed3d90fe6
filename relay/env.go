package relay

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// substitution is one scalar whose value came (partly) from the
// environment: what the file says and what it became. Error messages show
// the first, never the second (see redact).
type substitution struct {
	raw, value string
}

// expandEnv replaces ${NAME} and ${NAME:-default} in every scalar value of
// the parsed document with the environment variable's value, so that
// secrets stay out of the file. It runs after parsing, on values only: a
// value may hold any character (#, quotes, newlines, YAML syntax) and can
// never add keys or end early at a '#'. Keys and comments are left alone;
// "$${" is a literal "${". An unset variable without a default, an
// unclosed "${" and an empty "${}" are errors naming the line; all are
// reported at once. lookup is os.LookupEnv outside tests.
func expandEnv(root *yaml.Node, lookup func(string) (string, bool)) ([]substitution, error) {
	var subs []substitution
	var errs []error
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c)
			}
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				walk(n.Content[i])
			}
		case yaml.ScalarNode:
			if !strings.Contains(n.Value, "${") {
				return
			}
			v, changed, err := expandValue(n.Value, lookup, &subs)
			if err != nil {
				errs = append(errs, fmt.Errorf("config: line %d: %w", n.Line, err))
				return
			}
			if !changed {
				n.Value = v
				return
			}
			subs = append(subs, substitution{raw: n.Value, value: v})
			n.Value = v
			if n.Style&yaml.TaggedStyle == 0 {
				// The value is typed by what it now holds, so that
				// "port: ${PORT}" (or '${PORT}', as a flow mapping needs)
				// is a number; a string field takes any scalar as text. An
				// empty or null-looking value stays a string, not null.
				n.Tag, n.Style = "", 0
				switch v {
				case "", "~", "null", "Null", "NULL":
					n.Tag = "!!str"
				}
			}
		}
	}
	walk(root)
	return subs, errors.Join(errs...)
}

// expandValue expands the references in one value. changed is false when
// it held no reference (only "$${" escapes, perhaps).
//
// Each variable's value is added to subs, shown as ${NAME}: a part of a
// value can appear in a message on its own (a port out of a URL).
func expandValue(s string, lookup func(string) (string, bool), subs *[]substitution) (out string, changed bool, err error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), changed, nil
		}
		if i > 0 && s[i-1] == '$' {
			// "$${" is a literal "${".
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", false, fmt.Errorf("unclosed ${ (want ${NAME} or ${NAME:-default}; $${ is a literal ${)")
		}
		ref := s[i+2 : i+end]
		name, def, hasDef := strings.Cut(ref, ":-")
		switch {
		case name == "":
			return "", false, fmt.Errorf("empty ${} (want ${NAME} or ${NAME:-default})")
		case !validEnvName(name):
			return "", false, fmt.Errorf("${%s}: %s is not a variable name (letters, digits and _, not starting with a digit)", name, strconv.Quote(name))
		}
		v, ok := lookup(name)
		switch {
		case ok:
		case hasDef:
			v = def
		default:
			return "", false, fmt.Errorf("environment variable %s is not set (and ${%s} has no :-default)", name, name)
		}
		b.WriteString(v)
		*subs = append(*subs, substitution{raw: "${" + name + "}", value: v})
		changed = true
		s = s[i+end+1:]
	}
}

func validEnvName(s string) bool {
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// redact rewrites err so that no substituted value appears in it: each is
// shown as the file spells it (with its ${NAME}). Values shorter than four
// bytes are replaced only where quoted, so that a "1" does not rewrite
// every digit of a message.
func redact(err error, subs []substitution) error {
	if err == nil || len(subs) == 0 {
		return err
	}
	sort.Slice(subs, func(i, j int) bool { return len(subs[i].value) > len(subs[j].value) })
	var out []error
	for _, e := range Errors(err) {
		msg := e.Error()
		for _, s := range subs {
			if s.value == "" || s.value == s.raw {
				continue
			}
			q, rq := strconv.Quote(s.value), strconv.Quote(s.raw)
			msg = strings.ReplaceAll(msg, q, rq)
			msg = strings.ReplaceAll(msg, "`"+s.value+"`", "`"+s.raw+"`")
			if len(s.value) > 10 {
				// The YAML decoder shows the first 7 bytes of a longer value.
				msg = strings.ReplaceAll(msg, "`"+s.value[:7]+"...`", "`"+s.raw+"`")
			}
			if len(s.value) >= 4 {
				msg = strings.ReplaceAll(msg, q[1:len(q)-1], rq[1:len(rq)-1])
				msg = strings.ReplaceAll(msg, s.value, s.raw)
			}
		}
		out = append(out, fmt.Errorf("%s", msg))
	}
	return errors.Join(out...)
}
