package opcuasource_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apbridge/apbridge/bridge/opcuasource"
)

// TestSecurityValidate: every bad setting is refused before any
// connection, with the field and what is allowed.
func TestSecurityValidate(t *testing.T) {
	cert, key := clientCert(t)
	notACert := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notACert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	secure := opcuasource.Security{Policy: "Basic256Sha256", Mode: "SignAndEncrypt", CertFile: cert, KeyFile: key}
	for _, tc := range []struct {
		name string
		mod  func(*opcuasource.Security)
		want string
	}{
		{"policy", func(s *opcuasource.Security) { s.Policy = "Basic128Rsa15" }, `security.policy: "Basic128Rsa15" is not valid`},
		{"mode", func(s *opcuasource.Security) { s.Mode = "Encrypt" }, `security.mode: "Encrypt" is not valid`},
		{"auto with a mode", func(s *opcuasource.Security) { s.Policy, s.Mode = "auto", "Sign" }, `security.mode: "Sign" with policy auto`},
		{"no certificate", func(s *opcuasource.Security) { s.CertFile = "" }, "certFile and keyFile are required with policy Basic256Sha256"},
		{"pinned file is not a certificate", func(s *opcuasource.Security) { s.ServerCerts = []string{notACert} },
			"security.serverCerts[0]: " + notACert + " is not a certificate"},
		{"pinned file is a key", func(s *opcuasource.Security) { s.ServerCerts = []string{key} }, "client.key is not a certificate"},
		{"pins per endpoint", func(s *opcuasource.Security) { s.ServerCerts = []string{cert, cert} }, "serverCerts: 2 given, want one per endpoint (1)"},
		{"pin and trust", func(s *opcuasource.Security) { s.ServerCerts, s.TrustDir = []string{cert}, t.TempDir() }, "serverCerts and trustDir are alternatives"},
		{"trust dir is a file", func(s *opcuasource.Security) { s.TrustDir = cert }, "is not a directory"},
		{"user without password", func(s *opcuasource.Security) { s.Username = "relay" }, "username and password go together"},
		{"two logins", func(s *opcuasource.Security) {
			s.Username, s.Password, s.UserCertFile, s.UserKeyFile = "u", "p", cert, key
		},
			"username and userCertFile are alternatives"},
		{"user key missing", func(s *opcuasource.Security) { s.UserCertFile = cert }, "userCertFile and userKeyFile go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec := secure
			tc.mod(&sec)
			err := sec.Validate("security", 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if err := secure.Validate("security", 1); err != nil {
		t.Fatalf("a good setting refused: %v", err)
	}
	// With partner discovery one endpoint has two servers: the pins are
	// the endpoint's server's and the partner's.
	pinned := secure
	pinned.ServerCerts = []string{cert}
	if err := pinned.ValidateFor("security", 1, true); err == nil ||
		!strings.Contains(err.Error(), "security.serverCerts: 1 given, want 2 with discoverPartner") {
		t.Fatalf("one pin with discoverPartner: %v", err)
	}
	pinned.ServerCerts = []string{cert, cert}
	if err := pinned.ValidateFor("security", 1, true); err != nil {
		t.Fatalf("two pins with discoverPartner refused: %v", err)
	}
}
