package http

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

func writePEM(t *testing.T, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), typ+".pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSender_TLSWithSelfSignedCA(t *testing.T) {
	srv := httptest.NewTLSServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {}))
	t.Cleanup(srv.Close)
	ca := writePEM(t, "CERTIFICATE", srv.Certificate().Raw)

	if err := sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL, TLS: routes.TLS{CAFile: ca}}), envelope("x")); err != nil {
		t.Errorf("with ca_file: %v", err)
	}
	if err := sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL, TLS: routes.TLS{InsecureSkipVerify: true}}), envelope("x")); err != nil {
		t.Errorf("with insecure_skip_verify: %v", err)
	}
	err := sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL}), envelope("x"))
	var ua x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &ua) {
		t.Errorf("without the CA: %v, want an unknown-authority error", err)
	}
}

func TestSender_TLSClientCertificate(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gobridge-test-client"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := writePEM(t, "CERTIFICATE", der), writePEM(t, "EC PRIVATE KEY", keyDER)

	var gotCN string
	srv := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		gotCN = r.TLS.PeerCertificates[0].Subject.CommonName
	}))
	pool := x509.NewCertPool()
	pool.AddCert(clientCert)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := writePEM(t, "CERTIFICATE", srv.Certificate().Raw)

	s := newSender(t, routes.SenderOptions{URL: srv.URL, TLS: routes.TLS{CAFile: ca, CertFile: certFile, KeyFile: keyFile}})
	if err := sendOne(t, s, envelope("x")); err != nil || gotCN != "gobridge-test-client" {
		t.Fatalf("with client certificate: err %v, server saw %q", err, gotCN)
	}
	err = sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL, TLS: routes.TLS{CAFile: ca}}), envelope("x"))
	if class, _ := senders.Classify(err); err == nil || class == senders.OK {
		t.Fatalf("without client certificate the server must refuse: %v", err)
	}
}
