// Package tlsconf builds TLS client configurations from the PEM files a
// config names, with errors that name the config field: the relay's NATS
// connection and the gateway source's gRPC channels share it.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Client returns a TLS 1.2+ client configuration: ca is the PEM file of
// the roots ("" for the system's), cert and key a client certificate (both
// or neither), serverName the name the server's certificate must carry
// ("" for the dialled host). field prefixes errors, e.g. "nats.tls".
func Client(field, ca, cert, key, serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s.ca: %w", field, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca: %s holds no PEM certificate", field, ca)
		}
		tc.RootCAs = pool
	}
	if cert != "" || key != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}
