package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority generated at start for a test cluster. It
// signs one certificate valid for 127.0.0.1, ::1 and localhost, which every
// node serves.
type CA struct {
	pool       *x509.CertPool
	serverCert tls.Certificate
	caPEM      []byte
	caFile     string
}

// newCA creates a CA and a server certificate signed by it, and writes the
// CA certificate to dir/ca.pem for tools that want a file.
func newCA(dir string) (*CA, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "apbridge testcluster CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	ca := &CA{
		pool:       pool,
		serverCert: tls.Certificate{Certificate: [][]byte{srvDER, caDER}, PrivateKey: srvKey},
		caPEM:      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}
	if dir != "" {
		ca.caFile = filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(ca.caFile, ca.caPEM, 0o600); err != nil {
			return nil, fmt.Errorf("natstest: write CA: %w", err)
		}
	}
	return ca, nil
}

// ServerConfig returns the TLS configuration every node serves.
func (ca *CA) ServerConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{ca.serverCert},
		MinVersion:   tls.VersionTLS12,
	}
}

// ClientConfig returns a client TLS configuration that trusts the CA.
func (ca *CA) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
}

// PEM returns the CA certificate in PEM form.
func (ca *CA) PEM() []byte { return ca.caPEM }

// File returns the path of the CA certificate written at start.
func (ca *CA) File() string { return ca.caFile }
