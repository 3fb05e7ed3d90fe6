package opcuasource

import (
	"context"
	"crypto/sha1"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// dialer works out a client's options for one connection from what the
// server says about itself. Setting the security policy, mode and server
// certificate by hand is not enough: the OpenSecureChannel request must
// also carry the thumbprint of the server's certificate, and a user-name
// login the server's policy ID for the token, both of which come from the
// server's endpoint description (OPC UA Part 4, GetEndpoints, which a
// server answers on an unsecured channel).
type dialer struct {
	sec  Security
	log  zerolog.Logger
	auth []opcua.Option

	mu     sync.Mutex
	logged map[string]string // endpoint URL -> the server thumbprint logged last
}

func newDialer(sec Security, log zerolog.Logger) (*dialer, error) {
	auth, err := sec.clientAuth(log)
	if err != nil {
		return nil, err
	}
	return &dialer{sec: sec, log: log, auth: auth, logged: map[string]string{}}, nil
}

// ClientOptions returns the gopcua client options for one connection to
// the endpoint with the given index (0 primary, 1 backup) at url: the
// client certificate and the user, and, when the channel is secured, a
// login is given or the server's certificate is pinned or must be trusted,
// what the server's matching endpoint description says (asked with
// GetEndpoints within ctx), its certificate checked first.
func (c Security) ClientOptions(ctx context.Context, endpoint int, url string) ([]opcua.Option, error) {
	d, err := newDialer(c, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	return d.options(ctx, endpoint, url)
}

func (d *dialer) pairOptions(ctx context.Context, e servicelevel.Endpoint, url string) ([]opcua.Option, error) {
	return d.options(ctx, int(e), url)
}

func (d *dialer) options(ctx context.Context, endpoint int, url string) ([]opcua.Option, error) {
	opts := slices.Clone(d.auth)
	if !d.sec.discovers() {
		return append(opts, opcua.SecurityPolicy("None"), opcua.SecurityModeString("None")), nil
	}
	eps, err := opcua.GetEndpoints(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("get endpoints of %s: %w", url, err)
	}
	ep, err := d.sec.selectEndpoint(eps)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	if err := d.sec.checkServerCert(endpoint, ep.ServerCertificate); err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	tt := d.sec.tokenType()
	if !offersToken(ep, tt) {
		return nil, fmt.Errorf("%s: the endpoint (%s) offers no %s login (it offers %s)",
			url, endpointName(ep), tokenName(tt), strings.Join(tokenNames(ep), ", "))
	}
	d.logServer(url, ep)
	return append(opts, opcua.SecurityFromEndpoint(ep, tt)), nil
}

// logServer logs the server's certificate at the first connection to url,
// and again when it changes.
func (d *dialer) logServer(url string, ep *ua.EndpointDescription) {
	tp := thumbprint(ep.ServerCertificate)
	d.mu.Lock()
	seen := d.logged[url]
	d.logged[url] = tp
	d.mu.Unlock()
	if seen == tp {
		return
	}
	ev := d.log.Info()
	if seen != "" {
		ev = d.log.Warn().Str("previous", seen)
	}
	subject := "(no certificate)"
	if cert, err := x509.ParseCertificate(ep.ServerCertificate); err == nil {
		subject = cert.Subject.String()
	}
	ev.Str("endpoint", url).Str("security", endpointName(ep)).Str("thumbprint", tp).Str("subject", subject).
		Msg("OPC UA server certificate")
}

// selectEndpoint picks the endpoint description that matches the policy
// and mode, or with policy auto the strongest the server offers of those
// the client supports (the server's SecurityLevel decides; Sign and
// Encrypt before Sign on a tie).
func (c Security) selectEndpoint(eps []*ua.EndpointDescription) (*ua.EndpointDescription, error) {
	policy, mode := c.Policy, c.Mode
	if policy == "" {
		policy = "None"
	}
	if mode == "" {
		mode = "None"
	}
	var best *ua.EndpointDescription
	for _, ep := range eps {
		if !strings.HasPrefix(ep.EndpointURL, "opc.tcp://") && ep.EndpointURL != "" {
			continue // another transport (HTTPS, WebSockets)
		}
		name := strings.TrimPrefix(ep.SecurityPolicyURI, ua.SecurityPolicyURIPrefix)
		if policy == policyAuto {
			if !slices.Contains(validPolicies[:len(validPolicies)-1], name) {
				continue
			}
			if best == nil || ep.SecurityLevel > best.SecurityLevel ||
				ep.SecurityLevel == best.SecurityLevel && ep.SecurityMode > best.SecurityMode {
				best = ep
			}
			continue
		}
		if name == policy && ep.SecurityMode.String() == "MessageSecurityMode"+mode {
			return ep, nil
		}
	}
	if best != nil {
		return best, nil
	}
	offered := make([]string, 0, len(eps))
	for _, ep := range eps {
		offered = append(offered, endpointName(ep))
	}
	slices.Sort(offered)
	return nil, fmt.Errorf("the server offers no endpoint with policy %s and mode %s (it offers %s)",
		policy, mode, strings.Join(slices.Compact(offered), ", "))
}

// checkServerCert checks the server's certificate (DER) against the pinned
// one of the endpoint, or against the trust directory.
func (c Security) checkServerCert(endpoint int, der []byte) error {
	got := thumbprint(der)
	switch {
	case endpoint < len(c.ServerCerts):
		f := c.ServerCerts[endpoint]
		pinned, err := readCertificate(f)
		if err != nil {
			return fmt.Errorf("pinned server certificate %s: %w", f, err)
		}
		if want := thumbprint(pinned.Raw); want != got {
			return fmt.Errorf("the server's certificate (thumbprint %s%s) is not the pinned one (thumbprint %s, %s): "+
				"refusing to connect", got, subjectOf(der), want, f)
		}
	case c.TrustDir != "":
		trusted, err := readTrustDir(c.TrustDir)
		if err != nil {
			return err
		}
		if !slices.Contains(trusted, got) {
			return fmt.Errorf("the server's certificate (thumbprint %s%s) is not in trustDir %s (%d certificates there): "+
				"copy it there to trust it", got, subjectOf(der), c.TrustDir, len(trusted))
		}
	}
	return nil
}

// tokenType is the user token type the login uses.
func (c Security) tokenType() ua.UserTokenType {
	switch {
	case c.Username != "":
		return ua.UserTokenTypeUserName
	case c.UserCertFile != "":
		return ua.UserTokenTypeCertificate
	}
	return ua.UserTokenTypeAnonymous
}

func offersToken(ep *ua.EndpointDescription, tt ua.UserTokenType) bool {
	for _, t := range ep.UserIdentityTokens {
		if t.TokenType == tt {
			return true
		}
	}
	return false
}

func tokenNames(ep *ua.EndpointDescription) []string {
	var out []string
	for _, t := range ep.UserIdentityTokens {
		out = append(out, tokenName(t.TokenType))
	}
	if len(out) == 0 {
		out = append(out, "none")
	}
	return out
}

func tokenName(tt ua.UserTokenType) string {
	switch tt {
	case ua.UserTokenTypeAnonymous:
		return "anonymous"
	case ua.UserTokenTypeUserName:
		return "user-name"
	case ua.UserTokenTypeCertificate:
		return "X.509 certificate"
	case ua.UserTokenTypeIssuedToken:
		return "issued-token"
	}
	return tt.String()
}

// endpointName is "policy/mode" as the configuration spells them.
func endpointName(ep *ua.EndpointDescription) string {
	return strings.TrimPrefix(ep.SecurityPolicyURI, ua.SecurityPolicyURIPrefix) + "/" +
		strings.TrimPrefix(ep.SecurityMode.String(), "MessageSecurityMode")
}

// thumbprint is a certificate's SHA-1 thumbprint in hex, as OPC UA
// identifies certificates.
func thumbprint(der []byte) string {
	sum := sha1.Sum(der)
	return hex.EncodeToString(sum[:])
}

func subjectOf(der []byte) string {
	if cert, err := x509.ParseCertificate(der); err == nil {
		return ", subject " + cert.Subject.String()
	}
	return ""
}

// readTrustDir returns the thumbprints of the certificates in dir; files
// that hold no certificate are skipped.
func readTrustDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("trustDir: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if cert, err := readCertificate(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, thumbprint(cert.Raw))
		}
	}
	return out, nil
}
