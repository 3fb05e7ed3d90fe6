package wire

import (
	"fmt"
	"strings"
)

// Mapper turns tag names into NATS subjects with a template such as
// "plant.{source}.{tag}". Placeholders:
//
//	{source}  the source's name, as one token
//	{tag}     the tag's name, split into tokens at '.' and '/'
//	{tagid}   the tag's name as one token ('.' and '/' escaped)
//	{address} the tag's address at the source (an OPC UA node ID), as one token
//
// Each token is escaped: every byte other than ASCII letters, digits and
// "-_=:;@!$&()+,~" becomes %XX, so spaces, wildcards, dots inside a token and
// non-ASCII names cannot produce a bad subject. Literal parts of the
// template must be valid subject tokens themselves.
type Mapper struct {
	template string
	parts    []tmplPart
}

type tmplPart struct {
	literal string // when placeholder is ""
	ph      string
}

// NewMapper parses and checks a subject template.
func NewMapper(template string) (*Mapper, error) {
	m := &Mapper{template: template}
	if template == "" {
		return nil, fmt.Errorf("subject template is empty")
	}
	rest := template
	for rest != "" {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			m.parts = append(m.parts, tmplPart{literal: rest})
			break
		}
		if i > 0 {
			m.parts = append(m.parts, tmplPart{literal: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("subject template %q: unclosed '{'", template)
		}
		name := rest[i+1 : i+j]
		if !isPlaceholder(name) {
			return nil, fmt.Errorf("subject template %q: unknown placeholder {%s} (valid: {source}, {tag}, {tagid}, {address})", template, name)
		}
		m.parts = append(m.parts, tmplPart{ph: name})
		rest = rest[i+j+1:]
	}
	// Check the literal structure with sample values in the placeholders.
	sample, err := m.expand("s", "t", "a")
	if err != nil {
		return nil, err
	}
	if err := ValidateSubject(sample); err != nil {
		return nil, fmt.Errorf("subject template %q: %w", template, err)
	}
	return m, nil
}

// isPlaceholder reports whether {name} is a placeholder of a template.
func isPlaceholder(name string) bool {
	switch name {
	case "source", "tag", "tagid", "address":
		return true
	}
	return false
}

// Template returns the template the Mapper was made from.
func (m *Mapper) Template() string { return m.template }

// Subject returns the subject of tag (with address) of source.
func (m *Mapper) Subject(source, tag, address string) (string, error) {
	s, err := m.expand(source, tag, address)
	if err != nil {
		return "", fmt.Errorf("tag %q: %w", tag, err)
	}
	if err := ValidateSubject(s); err != nil {
		return "", fmt.Errorf("tag %q: %w", tag, err)
	}
	return s, nil
}

func (m *Mapper) expand(source, tag, address string) (string, error) {
	var b strings.Builder
	b.Grow(len(m.template) + len(source) + len(tag) + len(address))
	for _, p := range m.parts {
		switch p.ph {
		case "":
			b.WriteString(p.literal)
		case "source":
			if source == "" {
				return "", fmt.Errorf("empty source name in subject template %q", m.template)
			}
			b.WriteString(EscapeToken(source))
		case "tag":
			// The name's tokens between '.' and '/', empty ones dropped
			// (strings.FieldsFunc's, without its slice).
			n := 0
			for rest := tag; rest != ""; {
				t := rest
				if j := strings.IndexAny(rest, "./"); j >= 0 {
					t, rest = rest[:j], rest[j+1:]
				} else {
					rest = ""
				}
				if t == "" {
					continue
				}
				if n > 0 {
					b.WriteByte('.')
				}
				b.WriteString(EscapeToken(t))
				n++
			}
			if n == 0 {
				return "", fmt.Errorf("tag name %q has no token for {tag}", tag)
			}
		case "tagid":
			if tag == "" {
				return "", fmt.Errorf("empty tag name")
			}
			b.WriteString(EscapeToken(tag))
		case "address":
			if address == "" {
				return "", fmt.Errorf("tag has no address for {address}")
			}
			b.WriteString(EscapeToken(address))
		}
	}
	return b.String(), nil
}

// EscapeToken makes s safe as one subject token.
func EscapeToken(s string) string {
	const hexd = "0123456789ABCDEF"
	safe := 0
	for safe < len(s) && tokenSafe(s[safe]) {
		safe++
	}
	if safe == len(s) {
		return s // the usual case: nothing to escape, nothing to copy
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:safe])
	for i := safe; i < len(s); i++ {
		c := s[i]
		if tokenSafe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&0xF])
	}
	return b.String()
}

func tokenSafe(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-_=:;@!$&()+,~", c) >= 0
}

// ValidateSubject checks that s is a subject a message can be published
// on: not empty, no empty tokens, no whitespace or control characters, and
// no wildcard tokens.
func ValidateSubject(s string) error {
	return checkSubject(s, func(i int, tok string, _ bool) error {
		if tok == "*" || tok == ">" {
			return fmt.Errorf("subject %q has the wildcard %q at position %d", s, tok, i+1)
		}
		return nil
	})
}

// ValidatePattern checks a subject pattern, such as a stream's subject:
// what ValidateSubject checks, but with the wildcards "*" and ">" allowed
// as whole tokens, and ">" only as the last. Inside a token NATS takes
// them as plain characters, which in a pattern is a mistake.
func ValidatePattern(s string) error {
	return checkSubject(s, func(i int, tok string, last bool) error {
		switch {
		case tok == ">" && !last:
			return fmt.Errorf("subject %q has '>' before its last token", s)
		case tok != "*" && tok != ">" && strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("subject %q has a wildcard inside its token %q at position %d", s, tok, i+1)
		}
		return nil
	})
}

// checkSubject checks what every subject and pattern must be (not empty,
// no whitespace or control characters, no empty token), and each token
// with check, in order.
func checkSubject(s string, check func(i int, tok string, last bool) error) error {
	if s == "" {
		return fmt.Errorf("subject is empty")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("subject %q contains whitespace or a control character at byte %d", s, i)
		}
	}
	// Token by token, without a slice of them: every tag's subject is
	// checked at every config change.
	rest := s
	for i := 0; ; i++ {
		tok, more, last := rest, "", true
		if j := strings.IndexByte(rest, '.'); j >= 0 {
			tok, more, last = rest[:j], rest[j+1:], false
		}
		if tok == "" {
			return fmt.Errorf("subject %q has an empty token at position %d", s, i+1)
		}
		if err := check(i, tok, last); err != nil {
			return err
		}
		if last {
			return nil
		}
		rest = more
	}
}
