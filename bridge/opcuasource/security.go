package opcuasource

import (
	"errors"
	"fmt"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua"
	"github.com/rs/zerolog"
	"os"
	"slices"
)

// Security is how an OPC UA source authenticates to its servers and which
// servers it trusts. docs/security.md explains certificates, trust and
// rotation.
type Security struct {
	// Policy is the security policy: None (default), Basic256Sha256,
	// Aes128_Sha256_RsaOaep, Aes256_Sha256_RsaPss, or auto for the
	// strongest policy and mode the server offers.
	Policy string `yaml:"policy,omitempty" json:"policy,omitempty"`
	// Mode is None (default), Sign or SignAndEncrypt; with policy auto,
	// empty or auto.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	// CertFile and KeyFile are the client's certificate and RSA key (PEM
	// when the name ends in .pem, DER otherwise). Required with a policy
	// other than None; created, self-signed for ApplicationURI, on first
	// run if absent.
	CertFile string `yaml:"certFile,omitempty" json:"certFile,omitempty"`
	KeyFile  string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
	// ApplicationURI is the client's ApplicationUri, written into a
	// created certificate. Default urn:apbridge:<hostname>.
	ApplicationURI string `yaml:"applicationUri,omitempty" json:"applicationUri,omitempty"`
	// ServerCerts pins the servers' certificates, one file per endpoint in
	// the order of the endpoints: the certificate a server presents must
	// be this one (same SHA-1 thumbprint), or the connection is refused.
	ServerCerts []string `yaml:"serverCerts,omitempty" json:"serverCerts,omitempty"`
	// TrustDir is a directory of trusted server certificates (PEM or DER
	// files), the alternative to ServerCerts: a server's certificate must
	// be one of them. Files are read at every connection, so a certificate
	// is trusted or withdrawn without a restart.
	TrustDir string `yaml:"trustDir,omitempty" json:"trustDir,omitempty"`
	// Username and Password select user-name login; anonymous without
	// them. Password may be given through the environment (see the
	// configuration reference) and never appears in logs.
	Username string `yaml:"username,omitempty" json:"username,omitempty"`
	Password string `yaml:"password,omitempty" json:"-"`
	// UserCertFile and UserKeyFile select an X.509 user certificate login
	// instead (PEM or DER, as CertFile and KeyFile).
	UserCertFile string `yaml:"userCertFile,omitempty" json:"userCertFile,omitempty"`
	UserKeyFile  string `yaml:"userKeyFile,omitempty" json:"userKeyFile,omitempty"`
}

// policyAuto asks for the strongest policy and mode the server offers.
const policyAuto = "auto"

var (
	validPolicies = []string{"None", "Basic256Sha256", "Aes128_Sha256_RsaOaep", "Aes256_Sha256_RsaPss", policyAuto}
	validModes    = []string{"None", "Sign", "SignAndEncrypt"}
)

// Validate checks the fields; field is the path to report, e.g.
// "sources[0].security", and endpoints the number of the source's
// endpoints. Files are read: a pinned certificate must be a certificate.
func (c Security) Validate(field string, endpoints int) error {
	return c.ValidateFor(field, endpoints, false)
}

// ValidateFor is Validate for a source that may discover its partner
// (uaclient.PairConfig.DiscoverPartner): its one endpoint's server and the
// partner found make two servers, so serverCerts pins two, the partner's
// second. A pin the discovered backup could bypass would be no pin.
func (c Security) ValidateFor(field string, endpoints int, discoverPartner bool) error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Policy != "" && !slices.Contains(validPolicies, c.Policy) {
		add("%s.policy: %q is not valid (valid: %v)", field, c.Policy, validPolicies)
	}
	switch {
	case c.Policy == policyAuto:
		if c.Mode != "" && c.Mode != policyAuto {
			add("%s.mode: %q with policy auto (valid: empty or auto; auto picks the mode too)", field, c.Mode)
		}
	case c.Mode != "" && !slices.Contains(validModes, c.Mode):
		add("%s.mode: %q is not valid (valid: %v)", field, c.Mode, validModes)
	case c.secure() != (c.Mode != "" && c.Mode != "None"):
		add("%s: policy %q and mode %q must both be None or both be set", field, c.Policy, c.Mode)
	}
	if c.secure() && (c.CertFile == "" || c.KeyFile == "") {
		add("%s: certFile and keyFile are required with policy %s", field, c.Policy)
	}
	switch n := len(c.ServerCerts); {
	case n == 0:
	case discoverPartner && endpoints == 1 && n != 2:
		add("%s.serverCerts: %d given, want 2 with discoverPartner: the endpoint's server's certificate, then its partner's, "+
			"which the backup found must present", field, n)
	case !(discoverPartner && endpoints == 1) && n != endpoints:
		add("%s.serverCerts: %d given, want one per endpoint (%d)", field, n, endpoints)
	}
	for i, f := range c.ServerCerts {
		if _, err := readCertificate(f); err != nil {
			add("%s.serverCerts[%d]: %v", field, i, err)
		}
	}
	if c.TrustDir != "" {
		if len(c.ServerCerts) > 0 {
			add("%s: serverCerts and trustDir are alternatives: give one", field)
		}
		if st, err := os.Stat(c.TrustDir); err != nil {
			add("%s.trustDir: %v", field, err)
		} else if !st.IsDir() {
			add("%s.trustDir: %s is not a directory", field, c.TrustDir)
		}
	}
	if (c.Username == "") != (c.Password == "") {
		add("%s: username and password go together", field)
	}
	if (c.UserCertFile == "") != (c.UserKeyFile == "") {
		add("%s: userCertFile and userKeyFile go together", field)
	}
	if c.Username != "" && c.UserCertFile != "" {
		add("%s: username and userCertFile are alternatives: give one", field)
	}
	if c.UserCertFile != "" {
		if _, err := readCertificate(c.UserCertFile); err != nil {
			add("%s.userCertFile: %v", field, err)
		}
	}
	return errors.Join(errs...)
}

// secure reports a policy other than None: the channel is signed, and
// the client needs a certificate.
func (c Security) secure() bool { return c.Policy != "" && c.Policy != "None" }

// discovers reports whether connecting needs the server's endpoint
// description (GetEndpoints): for a secure channel (its certificate and
// thumbprint), for a login other than anonymous (the token's policy ID),
// and to check the server's certificate against a pinned or trusted one.
func (c Security) discovers() bool {
	return c.secure() || c.Username != "" || c.UserCertFile != "" || len(c.ServerCerts) > 0 || c.TrustDir != ""
}

// PairOptions returns the Pair options that apply c to both endpoints:
// before every connection the Pair asks the server for its endpoints,
// selects the one that matches the policy and mode, checks the server's
// certificate and sets the channel and the login from it; partner
// discovery selects the partner's endpoint the same way. log gets the
// server certificate's thumbprint and subject at the first connection to
// each endpoint.
func (c Security) PairOptions(log zerolog.Logger) ([]uaclient.PairOption, error) {
	d, err := newDialer(c, log)
	if err != nil {
		return nil, err
	}
	// Partner discovery takes the partner's endpoint that these settings
	// connect to.
	return []uaclient.PairOption{uaclient.WithDialOptions(d.pairOptions), uaclient.WithEndpointSelector(c.selectEndpoint)}, nil
}

// clientAuth returns the options every client of c has, whatever the
// server: the client certificate (created if absent) and the user
// identity; the endpoint then supplies the rest.
func (c Security) clientAuth(log zerolog.Logger) ([]opcua.Option, error) {
	var opts []opcua.Option
	if c.secure() || c.Policy == policyAuto {
		if c.CertFile != "" {
			created, err := EnsureClientCertificate(c.CertFile, c.KeyFile, c.applicationURI())
			if err != nil {
				return nil, err
			}
			if cert, err := readCertificate(c.CertFile); err == nil {
				ev := log.Info()
				if created {
					ev = ev.Bool("created", true)
				}
				ev.Str("thumbprint", thumbprint(cert.Raw)).Str("subject", cert.Subject.String()).
					Str("file", c.CertFile).Msg("OPC UA client certificate")
			}
			opts = append(opts, opcua.CertificateFile(c.CertFile), opcua.PrivateKeyFile(c.KeyFile))
		}
	}
	switch {
	case c.Username != "":
		opts = append(opts, opcua.AuthUsername(c.Username, c.Password))
	case c.UserCertFile != "":
		cert, err := readCertificate(c.UserCertFile)
		if err != nil {
			return nil, fmt.Errorf("userCertFile: %w", err)
		}
		key, err := readRSAKey(c.UserKeyFile)
		if err != nil {
			return nil, fmt.Errorf("userKeyFile: %w", err)
		}
		opts = append(opts, opcua.AuthCertificate(cert.Raw), opcua.AuthPrivateKey(key))
	default:
		opts = append(opts, opcua.AuthAnonymous())
	}
	return opts, nil
}
