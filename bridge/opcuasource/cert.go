package opcuasource

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func (c Security) applicationURI() string {
	if c.ApplicationURI != "" {
		return c.ApplicationURI
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return "urn:apbridge:" + host
}

// EnsureClientCertificate creates a self-signed client certificate and RSA
// key for OPC UA at certFile and keyFile if neither exists, with appURI in
// its subject alternative names as OPC UA requires. It reports whether it
// created them. If only one of the two exists it refuses: overwriting half
// of a pair would break a certificate a server already trusts.
func EnsureClientCertificate(certFile, keyFile, appURI string) (created bool, err error) {
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	switch {
	case certErr == nil && keyErr == nil:
		return false, nil
	case certErr == nil || keyErr == nil:
		return false, fmt.Errorf("client certificate: only one of %s and %s exists; remove it or supply the other", certFile, keyFile)
	case !errors.Is(certErr, os.ErrNotExist) || !errors.Is(keyErr, os.ErrNotExist):
		return false, fmt.Errorf("client certificate: %v; %v", certErr, keyErr)
	}
	u, err := url.Parse(appURI)
	if err != nil {
		return false, fmt.Errorf("client certificate: applicationUri %q: %w", appURI, err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return false, err
	}
	host, _ := os.Hostname()
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "apbridge", Organization: []string{"apbridge"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(5, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment |
			x509.KeyUsageKeyEncipherment | x509.KeyUsageDataEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{u},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if host != "" {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return false, err
	}
	keyDER := x509.MarshalPKCS1PrivateKey(key)
	if err := writeCertFile(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return false, err
	}
	if err := writeCertFile(keyFile, "RSA PRIVATE KEY", keyDER, 0o600); err != nil {
		os.Remove(certFile)
		return false, err
	}
	return true, nil
}

// writeCertFile writes der, as PEM when the name ends in .pem (gopcua
// reads those as PEM and every other name as DER).
func writeCertFile(path, pemType string, der []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data := der
	if strings.HasSuffix(path, ".pem") {
		data = pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})
	}
	return os.WriteFile(path, data, mode)
}

// readCertificate reads a certificate file, PEM or DER.
func readCertificate(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	der := data
	if b, _ := pem.Decode(data); b != nil {
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s holds a PEM %q block, not a CERTIFICATE", path, b.Type)
		}
		der = b.Bytes
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("%s is not a certificate (neither PEM nor DER X.509): %v", path, err)
	}
	return cert, nil
}

// readRSAKey reads an RSA private key file: PEM (PKCS #1 or PKCS #8) or DER.
func readRSAKey(path string) (*rsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	der := data
	if b, _ := pem.Decode(data); b != nil {
		der = b.Bytes
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s is not an RSA private key (PKCS #1 or #8, PEM or DER)", path)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s holds a %T, not an RSA key", path, k)
	}
	return rk, nil
}
