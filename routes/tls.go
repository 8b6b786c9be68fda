package routes

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Config builds the settings as a *tls.Config (TLS 1.2 or later), reading
// the files they name. The bridge and the http sender both use it.
//
// A client (server false): ca_file replaces the system roots, cert_file and
// key_file present a client certificate, insecure_skip_verify turns off
// verification; nil (Go's defaults) when nothing is set.
//
// A server: cert_file and key_file are its certificate (nil without them:
// plain TCP); client_ca_file requires client certificates signed by those
// CAs.
func (t TLS) Config(server bool) (*tls.Config, error) {
	if t == (TLS{}) || (server && t.CertFile == "" && t.KeyFile == "") {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	var err error
	if server {
		if t.ClientCAFile != "" {
			c.ClientAuth = tls.RequireAndVerifyClientCert
			c.ClientCAs, err = certPool(t.ClientCAFile)
		}
		return c, err
	}
	c.InsecureSkipVerify = t.InsecureSkipVerify //nolint:gosec // the operator's explicit choice
	if t.CAFile != "" {
		c.RootCAs, err = certPool(t.CAFile)
	}
	return c, err
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", file)
	}
	return pool, nil
}
