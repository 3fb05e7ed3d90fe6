package relay

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The bad-input suite: testdata/bad holds one wrong config per file, each
// with a header of YAML comments that the test strips before parsing:
//
//	# want: a substring the error must contain (one line each)
//	# env: NAME=value       the environment the config sees
//	# secret: text          must not appear in the error
//	# ---
//
// Every file must be refused (not silently accepted), within a deadline
// (not hang), without a panic (not crash), with each wanted text.
// docs/operations.md has the table of the classes.

const badDeadline = 5 * time.Second

type badCase struct {
	want, secrets []string
	env           map[string]string
	config        []byte
}

func readBadCase(t *testing.T, path string) badCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head, config, ok := bytes.Cut(data, []byte("# ---\n"))
	if !ok {
		t.Fatalf("%s: no '# ---' line after the header", path)
	}
	bc := badCase{env: map[string]string{}, config: config}
	for _, line := range strings.Split(string(head), "\n") {
		switch {
		case strings.HasPrefix(line, "# want: "):
			bc.want = append(bc.want, strings.TrimPrefix(line, "# want: "))
		case strings.HasPrefix(line, "# env: "):
			k, v, _ := strings.Cut(strings.TrimPrefix(line, "# env: "), "=")
			bc.env[k] = v
		case strings.HasPrefix(line, "# secret: "):
			bc.secrets = append(bc.secrets, strings.TrimPrefix(line, "# secret: "))
		case line == "":
		default:
			t.Fatalf("%s: header line %q", path, line)
		}
	}
	if len(bc.want) == 0 {
		t.Fatalf("%s: no '# want:' line", path)
	}
	return bc
}

// parseGuarded parses with a deadline and turns a panic into an error
// that says so, so that one case cannot stop the suite.
func parseGuarded(data []byte, env map[string]string) (c *Config, err error, hung bool) {
	type result struct {
		c   *Config
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("PANIC: %v", p)}
			}
		}()
		c, err := parse(data, lookupIn(env))
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		return r.c, r.err, false
	case <-time.After(badDeadline):
		return nil, nil, true
	}
}

func TestBadInputs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 150 {
		t.Fatalf("%d bad inputs, want at least 150", len(files))
	}
	for _, path := range files {
		bc := readBadCase(t, path)
		t.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(t *testing.T) {
			_, err, hung := parseGuarded(bc.config, bc.env)
			switch {
			case hung:
				t.Fatalf("HANG: no answer in %v", badDeadline)
			case err == nil:
				t.Fatalf("ACCEPTED:\n%s", bc.config)
			case strings.HasPrefix(err.Error(), "PANIC"):
				t.Fatalf("CRASH: %v", err)
			}
			msg := err.Error()
			for _, w := range bc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", msg, w)
				}
			}
			for _, s := range bc.secrets {
				if strings.Contains(msg, s) {
					t.Errorf("error shows the secret %q:\n%s", s, msg)
				}
			}
		})
	}
}

// TestBadInputsPositiveControl: the suite's base config, with the
// header's environment, is accepted, so the refusals above come from the
// one change each file makes.
func TestBadInputsPositiveControl(t *testing.T) {
	bc := readBadCase(t, "testdata/bad/log-level.yaml")
	good := bytes.Replace(bc.config, []byte("logLevel: loud\n"), nil, 1)
	if _, err, _ := parseGuarded(good, nil); err != nil {
		t.Fatalf("the base config is refused: %v", err)
	}
	mx := readBadCase(t, "testdata/bad/mx-mode.yaml")
	good = bytes.Replace(mx.config, []byte("    mode: prepared\n"), nil, 1)
	if _, err, _ := parseGuarded(good, nil); err != nil {
		t.Fatalf("the base config with a gateway source is refused: %v", err)
	}
}

// TestBadFiles: what is not a config file gets one line saying what it is.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("# padding\n"), MaxConfigSize/10+1), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{dir, "config: " + dir + " is a directory, not a config file"},
		{big, "config: the file is over 4 MiB, the limit for a config file"},
		{empty, "config: the file is empty"},
		{filepath.Join(dir, "missing.yaml"), "no such file or directory"},
	} {
		_, err := Load(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%s: error %v, want one line with %q", tc.path, err, tc.want)
		}
	}
}
