package sqs

import (
	"crypto/md5"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// TestSender_AKeyRotatedInTheCredentialsFileIsUsed: static keys in the
// shared credentials file (a plant machine has no instance role) are
// rotated by writing the new key there and deactivating the old one. SQS
// refuses the old key with InvalidClientTokenId, retried as the target's
// failure; the retry must sign with the new key, not the one the SDK read
// at start. The server accepts only requests signed with the key NEW.
func TestSender_AKeyRotatedInTheCredentialsFileIsUsed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "credentials")
	write := func(key string) {
		if err := os.WriteFile(file, []byte("[plant]\naws_access_key_id = "+key+"\naws_secret_access_key = secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("OLD")
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_SHARED_CREDENTIALS_FILE": file, "AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_PROFILE": "plant"} {
		t.Setenv(k, v)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if !strings.Contains(r.Header.Get("Authorization"), "Credential=NEW/") {
			w.Header().Set("X-Amzn-Query-Error", "InvalidClientTokenId;Sender")
			w.WriteHeader(403)
			io.WriteString(w, `{"__type":"com.amazon.coral.service#InvalidClientTokenId","message":"The security token included in the request is invalid."}`)
			return
		}
		var in struct {
			Entries []struct{ Id, MessageBody string }
		}
		json.NewDecoder(r.Body).Decode(&in)
		var ok []map[string]any
		for _, e := range in.Entries {
			ok = append(ok, map[string]any{"Id": e.Id, "MessageId": "m" + e.Id, "MD5OfMessageBody": fmt.Sprintf("%x", md5.Sum([]byte(e.MessageBody)))})
		}
		json.NewEncoder(w).Encode(map[string]any{"Successful": ok, "Failed": []any{}})
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, routes.SenderOptions{QueueURL: srv.URL + "/000000000000/q", Endpoint: srv.URL})
	send := func() error { return s.Send(t.Context(), envelopes(1, "a/b", func(int) string { return "x" }))[0] }
	if err := send(); err == nil || !strings.Contains(err.Error(), "InvalidClientTokenId") {
		t.Fatalf("signed with the old key: %v, want InvalidClientTokenId", err)
	} else if class, _ := senders.Classify(err); class != senders.Transient {
		t.Fatalf("class %v, want transient: %v", class, err)
	}
	write("NEW")
	if err := send(); err != nil {
		t.Fatalf("after the key was rotated in the credentials file: %v", err)
	}
}
