package relay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
// and within a second; an accepted config validates again.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	for i, p := range files {
		if i%4 != 0 { // a quarter of the bad-input suite seeds the corpus
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
	})
}
