package wire

import (
	"strings"
	"testing"
)

// unescapeToken is EscapeToken's inverse.
func unescapeToken(t *testing.T, e string) string {
	var b strings.Builder
	for i := 0; i < len(e); i++ {
		if e[i] != '%' {
			b.WriteByte(e[i])
			continue
		}
		if i+2 >= len(e) {
			t.Fatalf("%q: truncated escape at %d", e, i)
		}
		var v byte
		for _, c := range []byte(e[i+1 : i+3]) {
			v <<= 4
			switch {
			case c >= '0' && c <= '9':
				v |= c - '0'
			case c >= 'A' && c <= 'F':
				v |= c - 'A' + 10
			default:
				t.Fatalf("%q: bad escape %q", e, e[i:i+3])
			}
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String()
}

// FuzzEscapeToken: an escaped name is one valid subject token of safe
// bytes, and unescapes to the name: two names never share a token.
func FuzzEscapeToken(f *testing.F) {
	for _, s := range []string{"Line1.Temp", "a b", "*", ">", "ns=2;s=X", "%41", "Température", "\x00\x7f", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := EscapeToken(s)
		for i := 0; i < len(e); i++ {
			if !tokenSafe(e[i]) && e[i] != '%' {
				t.Fatalf("EscapeToken(%q) = %q: byte %q", s, e, e[i])
			}
		}
		if got := unescapeToken(t, e); got != s {
			t.Fatalf("EscapeToken(%q) = %q unescapes to %q", s, e, got)
		}
		if s != "" {
			if err := ValidateSubject("p." + e); err != nil {
				t.Fatalf("EscapeToken(%q) = %q: %v", s, e, err)
			}
		}
	})
}

// FuzzMapperSubject: whatever the names, a template's subject is valid
// (no wildcard, empty token or space) or an error, and CanOverlap,
// CanBeReserved and Reserved agree with the subject it gives.
func FuzzMapperSubject(f *testing.F) {
	f.Add(uint8(0), "line1", "Line1.Temp", "ns=2;s=Line1.Temp")
	f.Add(uint8(1), "write", "a..b", "")
	f.Add(uint8(2), "*", "./.", "i=85")
	f.Add(uint8(4), "$SYS", "REQ.SERVER.PING", "")
	f.Add(uint8(5), "line1", "$JS.API.STREAM.DELETE.PLANT", "")
	f.Add(uint8(6), "line1", "_INBOX.x", "")
	f.Add(uint8(7), "line1", "$x", "$y")
	templates := []string{"apbridge.{source}.{tag}", "apbridge.{tag}", "p.{source}.{tagid}", "p.x{address}y.{tag}.v", "{source}.{tag}",
		"{tag}", "$KV.p.{tag}", "{tagid}x.{address}"}
	f.Fuzz(func(t *testing.T, ti uint8, source, tag, address string) {
		m, err := NewMapper(templates[int(ti)%len(templates)])
		if err != nil {
			t.Fatal(err)
		}
		subj, err := m.Subject(source, tag, address)
		if err != nil {
			return
		}
		if err := ValidateSubject(subj); err != nil {
			t.Fatalf("%q: %v", subj, err)
		}
		if !m.CanOverlap(source, subj) {
			t.Fatalf("template %q with source %q gives %q but CanOverlap says it cannot", m.Template(), source, subj)
		}
		_, reserved := Reserved(subj)
		if _, can := m.CanBeReserved(source); reserved && !can {
			t.Fatalf("template %q with source %q gives the reserved %q but CanBeReserved says it cannot", m.Template(), source, subj)
		}
		if _, every := m.Reserved(); every && !reserved {
			t.Fatalf("template %q gives %q, outside every reserved space, but Reserved says all its subjects are in one", m.Template(), subj)
		}
	})
}
