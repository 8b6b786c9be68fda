package http

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/gobridge/gobridge/routes"
)

// tlsConfig builds the client TLS settings: ca_file replaces the system
// roots with the CAs in that PEM file; cert_file and key_file (both or
// neither) present a client certificate; insecure_skip_verify turns off
// server verification. It returns nil (Go's defaults) when nothing is set.
func tlsConfig(t routes.TLS) (*tls.Config, error) {
	if t == (routes.TLS{}) {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca_file %s: no PEM certificate found", t.CAFile)
		}
		c.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	case t.CertFile != "" || t.KeyFile != "":
		return nil, errors.New("tls: cert_file and key_file go together")
	}
	return c, nil
}
