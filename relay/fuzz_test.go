package relay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/apbridge/apbridge/wire"
	"gopkg.in/yaml.v3"
)

// FuzzExpandValue: any value and any variable value expand or fail
// without a panic; a value without "${" is left as it is, and with no "$$"
// escapes and no "${" in the variable, nothing of "${" is left.
func FuzzExpandValue(f *testing.F) {
	for _, s := range []string{"${A}", "x${A}y${B:-d}", "$${A}", "${", "${}", "${A", "${:-x}", "${A:-}", "$$${A}", "plain", "${A}${A}"} {
		f.Add(s, "abc #def")
	}
	f.Fuzz(func(t *testing.T, s, val string) {
		var subs []substitution
		out, changed, err := expandValue(s, func(string) (string, bool) { return val, true }, &subs)
		if err != nil {
			if !strings.Contains(s, "${") {
				t.Fatalf("%q: %v without a reference", s, err)
			}
			return
		}
		if !strings.Contains(s, "${") && out != s {
			t.Fatalf("%q became %q", s, out)
		}
		if changed != (len(subs) > 0) {
			t.Fatalf("%q: changed %v with %d substitutions", s, changed, len(subs))
		}
		if !strings.Contains(s, "$$") && !strings.Contains(val, "${") && strings.Contains(out, "${") {
			t.Fatalf("%q with %q expanded to %q", s, val, out)
		}
	})
}

// FuzzParse: any file is a config or a list of errors, without a panic
// and within a second; an accepted config validates again, and breaks
// none of the rules of acceptedRules.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	for i, p := range files {
		// A quarter of the bad-input suite goes into the corpus, and every
		// case of the rules acceptedRules checks.
		if i%4 != 0 && !strings.HasPrefix(filepath.Base(p), "reserved-") && !strings.HasPrefix(filepath.Base(p), "control-") &&
			!strings.HasPrefix(filepath.Base(p), "yaml-tag-") && !strings.HasPrefix(filepath.Base(p), "unused-") &&
			!strings.HasPrefix(filepath.Base(p), "zero-") {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(goodConfig))
	f.Add([]byte(mxConfig))
	f.Fuzz(func(t *testing.T, data []byte) {
		done := make(chan struct{})
		var c *Config
		var err error
		go func() {
			defer close(done)
			c, err = parse(data, lookupIn(map[string]string{"A": "a #b"}))
		}()
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatalf("no answer in a second for:\n%q", data)
		}
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted, then refused: %v", err)
		}
		acceptedRules(t, data, c)
	})
}

// acceptedRules fails t when an accepted config breaks a rule of issue 23
// that Parse must enforce: no subject in a reserved subject space, no
// control character in a name, no YAML tag outside the standard ones, no
// JetStream settings without the JetStream sink.
func acceptedRules(t *testing.T, data []byte, c *Config) {
	t.Helper()
	prefix, tmpl := c.Service.Prefix, c.Subject
	if prefix == "" {
		prefix = wire.DefaultPrefix
	}
	if tmpl == "" {
		tmpl = wire.DefaultSubject
	}
	if r, ok := wire.Reserved(prefix + ".status"); ok {
		t.Fatalf("accepted the service prefix %q in %s", prefix, r.Pattern)
	}
	m, err := wire.NewMapper(tmpl)
	if err != nil {
		t.Fatalf("accepted the template %q: %v", tmpl, err)
	}
	names := []string{c.Instance, c.NATS.Name}
	for _, s := range c.Sources {
		names = append(names, s.Name)
		tags := s.MxGateway.Tags
		for _, e := range s.listedTags("") {
			tags = append(tags, e.tag.TagConfig)
		}
		for _, tag := range tags {
			names = append(names, tag.Name)
			subject := tag.Subject
			if subject == "" {
				if subject, err = m.Subject(s.Name, tag.Name, tag.Address); err != nil {
					t.Fatalf("accepted tag %q without a subject: %v", tag.Name, err)
				}
			}
			if r, ok := wire.Reserved(subject); ok {
				t.Fatalf("accepted tag %q on %q, in %s", tag.Name, subject, r.Pattern)
			}
		}
		if _, ok := m.CanBeReserved(s.Name); ok && len(s.Browse) > 0 {
			t.Fatalf("accepted browse roots for source %q with the template %q", s.Name, tmpl)
		}
	}
	for _, js := range c.JetStream.Subjects {
		if r, ok := wire.Reserved(js); ok {
			t.Fatalf("accepted the stream subject %q, in %s", js, r.Pattern)
		}
	}
	if c.hasJetStream() && c.Sink != SinkJetStream {
		t.Fatalf("accepted JetStream settings with sink %q", c.Sink)
	}
	for _, n := range names {
		if strings.IndexFunc(n, unicode.IsControl) >= 0 {
			t.Fatalf("accepted the name %q", n)
		}
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) == nil {
		if errs := checkTags(&doc); len(errs) > 0 {
			t.Fatalf("accepted %v", errs[0])
		}
	}
}
