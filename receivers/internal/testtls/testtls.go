// Package testtls writes a throwaway certificate authority, a server
// certificate for 127.0.0.1 and a client certificate into a test's
// temporary directory, for the receivers' TLS tests.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files of a test PKI.
type Files struct {
	CAFile   string // the self-signed CA certificate
	CertFile string // server certificate for 127.0.0.1 and localhost, signed by the CA
	KeyFile  string // the server certificate's key
	// ClientCertFile is a client certificate with common name ClientCN,
	// signed by the CA; ClientKeyFile is its key.
	ClientCertFile, ClientKeyFile string
}

// ClientCN is the common name of the client certificate.
const ClientCN = "press-7"

// Server returns a server TLS config for f; with clientCerts it requires
// client certificates signed by the CA.
func (f Files) Server(t testing.TB, clientCerts bool) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCerts {
		c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, f.pool(t)
	}
	return c
}

// Client returns a client TLS config trusting the CA; with cert it
// presents the client certificate.
func (f Files) Client(t testing.TB, cert bool) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: f.pool(t)}
	if cert {
		kp, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c
}

func (f Files) pool(t testing.TB) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(f.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}

// Write creates a CA and a server certificate in t.TempDir(). The files are
// world-readable so that a broker which drops privileges can read them.
func Write(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gobridge test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey := newKey(t)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{
		CAFile:         filepath.Join(dir, "ca.pem"),
		CertFile:       filepath.Join(dir, "server.pem"),
		KeyFile:        filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	writePEM(t, f.CAFile, "CERTIFICATE", caDER)
	writePEM(t, f.CertFile, "CERTIFICATE", srvDER)
	writePEM(t, f.KeyFile, "PRIVATE KEY", keyDER)

	cliKey := newKey(t)
	cliDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: ClientCN},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &cliKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cliKeyDER, err := x509.MarshalPKCS8PrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, f.ClientCertFile, "CERTIFICATE", cliDER)
	writePEM(t, f.ClientKeyFile, "PRIVATE KEY", cliKeyDER)
	return f
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
