package tlsconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClientErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ ca, cert, key, want string }{
		{filepath.Join(dir, "missing.pem"), "", "", "sources[0].tls.ca: open"},
		{notPEM, "", "", "sources[0].tls.ca: " + notPEM + " holds no PEM certificate"},
		{"", notPEM, notPEM, "sources[0].tls: tls:"},
	}
	for _, tt := range tests {
		if _, err := Client("sources[0].tls", tt.ca, tt.cert, tt.key, ""); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Client(%q, %q, %q): %v, want %q...", tt.ca, tt.cert, tt.key, err, tt.want)
		}
	}
	tc, err := Client("nats.tls", "", "", "", "gw.plant")
	if err != nil || tc.ServerName != "gw.plant" || tc.MinVersion == 0 {
		t.Fatalf("plain client: %+v, %v", tc, err)
	}
}
