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
