package routes

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTLS_Config(t *testing.T) {
	for name, tc := range map[string]struct {
		tls    TLS
		server bool
	}{
		"nothing set":                  {TLS{}, false},
		"server without a certificate": {TLS{CAFile: "ca.pem", ClientCAFile: "ca.pem"}, true},
	} {
		if c, err := tc.tls.Config(tc.server); c != nil || err != nil {
			t.Errorf("%s: Config = %v, %v; want nil, nil", name, c, err)
		}
	}
	c, err := TLS{InsecureSkipVerify: true}.Config(false)
	if err != nil || c == nil || !c.InsecureSkipVerify {
		t.Errorf("insecure_skip_verify: Config = %+v, %v", c, err)
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []TLS{{CAFile: empty}, {CAFile: filepath.Join(t.TempDir(), "missing.pem")}, {CertFile: empty, KeyFile: empty}} {
		if _, err := bad.Config(false); err == nil {
			t.Errorf("Config(%+v) accepted", bad)
		}
	}
}
