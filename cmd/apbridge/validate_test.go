package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validateConfig is a config that validates; the relay package's tests
// cover the fields one by one.
const validateConfig = `
nats:
  servers: [nats://127.0.0.1:4222]
sources:
  - name: line1
    endpoints: [opc.tcp://127.0.0.1:4840, opc.tcp://127.0.0.1:4841]
    serviceLevelFailover: {enabled: true, degradedWindowSeconds: 10, minDwellSeconds: 60}
    tags:
      - {name: Line1.Temp, address: "ns=2;s=Line1.Temp"}
      - {name: Line1.SP, address: "ns=2;s=Line1.SP", writable: true}
`

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(validateConfig), 0o600)
	var out, errOut strings.Builder
	if code := run([]string{"validate", "--config", good}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "valid (1 sources, 2 tags listed") {
		t.Fatalf("output %q", out.String())
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(validateConfig, "degradedWindowSeconds: 10", "degradedWindowSeconds: 0", 1)+"logLevel: loud\n"), 0o600)
	out.Reset()
	errOut.Reset()
	if code := run([]string{"validate", "--config", bad}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d for a bad config", code)
	}
	// Every problem is reported, one per line.
	if !strings.Contains(errOut.String(), "logLevel") || !strings.Contains(errOut.String(), "degradedWindowSeconds") {
		t.Fatalf("stderr %q", errOut.String())
	}
}

// TestUsageErrors: a command line the relay cannot run is a usage error,
// exit status 2 with the reason on stderr; a bad config is status 1.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(validateConfig), 0o600)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"validate", "--config", good, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"validate", good}, 2, "unexpected argument"},
		{[]string{"validate"}, 2, "--config is required"},
		{[]string{"validate", "--conf", good}, 2, "flag provided but not defined: -conf"},
		{[]string{"run", "--config", good, "--drain-timeout", "0s"}, 2, "--drain-timeout: 0s is out of range"},
		{[]string{"run", "--config", good, "--drain-timeout", "-5s"}, 2, "--drain-timeout: -5s is out of range"},
		{[]string{"run", "--config", good, "--drain-timeout", "soon"}, 2, `invalid value "soon" for flag -drain-timeout`},
		{[]string{"run", "--config", good, "now"}, 2, `unexpected argument "now"`},
		{[]string{"version", "x"}, 2, "unexpected argument"},
		{[]string{"help", "run", "validate"}, 2, "one command at a time"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"validate", "--config", dir}, 1, "is a directory, not a config file"},
	} {
		var out, errOut strings.Builder
		if code := run(tc.args, &out, &errOut); code != tc.code || !strings.Contains(errOut.String(), tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.stderr)
		}
	}
}

// TestHelpAndVersion: help asked for and the version go to stdout, exit 0.
func TestHelpAndVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "usage: apbridge <command>"},
		{[]string{"--help"}, "version"},
		{[]string{"help", "run"}, "-drain-timeout"},
		{[]string{"run", "-h"}, "-drain-timeout"},
		{[]string{"version"}, "apbridge 0.1.0"},
		{[]string{"--version"}, "apbridge 0.1.0"},
	} {
		var out, errOut strings.Builder
		if code := run(tc.args, &out, &errOut); code != 0 || !strings.Contains(out.String(), tc.want) || errOut.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and %q on stdout", tc.args, code, out.String(), errOut.String(), tc.want)
		}
	}
}

// TestValidateWarnsSmallQueue: a queue too small for a takeover is a
// warning on stdout, and the config is still valid (exit 0); the control:
// the same config without it prints none.
func TestValidateWarnsSmallQueue(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, cfg string
		warn      bool
	}{
		{"defaults", validateConfig, false},
		{"queueSize 1", strings.Replace(validateConfig, "    tags:\n", "    queueSize: 1\n    tags:\n", 1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			os.WriteFile(path, []byte(tc.cfg), 0o600)
			var out, errOut strings.Builder
			if code := run([]string{"validate", "--config", path}, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			got := strings.Contains(out.String(), "WARNING: sources[0].queueSize: 1 holds") &&
				strings.Contains(out.String(), "needs 102 or more")
			if got != tc.warn || (!tc.warn && strings.Contains(out.String(), "WARNING")) {
				t.Fatalf("output %q, want a queueSize warning: %v", out.String(), tc.warn)
			}
		})
	}
}
