package opcuasource

import (
	"errors"
	"fmt"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua"
)

// Security is how an OPC UA source authenticates to its servers.
type Security struct {
	// Policy is the security policy: None (default), Basic256Sha256,
	// Aes128_Sha256_RsaOaep or Aes256_Sha256_RsaPss.
	Policy string `yaml:"policy,omitempty" json:"policy,omitempty"`
	// Mode is None (default), Sign or SignAndEncrypt.
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
	// ServerCerts are the servers' certificates, one per endpoint in the
	// order of the endpoints: the servers the client trusts.
	ServerCerts []string `yaml:"serverCerts,omitempty" json:"serverCerts,omitempty"`
	// Username and Password select user-name authentication; anonymous
	// without them. Password may be given through the environment (see
	// the configuration reference) and never appears in logs.
	Username string `yaml:"username,omitempty" json:"username,omitempty"`
	Password string `yaml:"password,omitempty" json:"-"`
}

var (
	validPolicies = []string{"None", "Basic256Sha256", "Aes128_Sha256_RsaOaep", "Aes256_Sha256_RsaPss"}
	validModes    = []string{"None", "Sign", "SignAndEncrypt"}
)

// Validate checks the fields; field is the path to report, e.g.
// "sources[0].security".
func (c Security) Validate(field string, endpoints int) error {
	var errs []error
	if c.Policy != "" && !contains(validPolicies, c.Policy) {
		errs = append(errs, fmt.Errorf("%s.policy: %q is not valid (valid: %v)", field, c.Policy, validPolicies))
	}
	if c.Mode != "" && !contains(validModes, c.Mode) {
		errs = append(errs, fmt.Errorf("%s.mode: %q is not valid (valid: %v)", field, c.Mode, validModes))
	}
	secure := c.Policy != "" && c.Policy != "None"
	if secure != (c.Mode != "" && c.Mode != "None") {
		errs = append(errs, fmt.Errorf("%s: policy %q and mode %q must both be None or both be set", field, c.Policy, c.Mode))
	}
	if secure && (c.CertFile == "" || c.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s: certFile and keyFile are required with policy %s", field, c.Policy))
	}
	if len(c.ServerCerts) > 0 && len(c.ServerCerts) != endpoints {
		errs = append(errs, fmt.Errorf("%s.serverCerts: %d given, want one per endpoint (%d)", field, len(c.ServerCerts), endpoints))
	}
	if (c.Username == "") != (c.Password == "") {
		errs = append(errs, fmt.Errorf("%s: username and password go together", field))
	}
	return errors.Join(errs...)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ClientOptions returns the gopcua client options that apply c to the
// endpoint with the given index (0 primary, 1 backup): security policy and
// mode, the client certificate (created if absent), that server's
// certificate and the user.
func (c Security) ClientOptions(endpoint int) ([]opcua.Option, error) {
	opts, err := c.commonOptions()
	if err != nil {
		return nil, err
	}
	if endpoint < len(c.ServerCerts) {
		opts = append(opts, opcua.RemoteCertificateFile(c.ServerCerts[endpoint]))
	}
	return opts, nil
}

func (c Security) commonOptions() ([]opcua.Option, error) {
	policy, mode := c.Policy, c.Mode
	if policy == "" {
		policy = "None"
	}
	if mode == "" {
		mode = "None"
	}
	opts := []opcua.Option{opcua.SecurityPolicy(policy), opcua.SecurityModeString(mode)}
	if policy != "None" {
		if _, err := EnsureClientCertificate(c.CertFile, c.KeyFile, c.applicationURI()); err != nil {
			return nil, err
		}
		opts = append(opts, opcua.CertificateFile(c.CertFile), opcua.PrivateKeyFile(c.KeyFile))
	}
	if c.Username != "" {
		opts = append(opts, opcua.AuthUsername(c.Username, c.Password))
	} else {
		opts = append(opts, opcua.AuthAnonymous())
	}
	return opts, nil
}

// PairOptions returns the Pair options that apply c to both endpoints.
func (c Security) PairOptions() ([]servicelevel.PairOption, error) {
	common, err := c.commonOptions()
	if err != nil {
		return nil, err
	}
	opts := []servicelevel.PairOption{servicelevel.WithClientOptions(common...)}
	for i, f := range c.ServerCerts {
		e := servicelevel.Primary
		if i == 1 {
			e = servicelevel.Backup
		}
		opts = append(opts, servicelevel.WithEndpointClientOptions(e, opcua.RemoteCertificateFile(f)))
	}
	return opts, nil
}
