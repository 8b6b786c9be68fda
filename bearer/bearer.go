// Package bearer checks "Authorization: Bearer TOKEN" on HTTP requests, the
// one way gobridge's HTTP servers (the admin API, HTTP ingest) authenticate
// a client. It is a leaf package (standard library only), so a receiver can
// use it without importing the admin API.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// Match reports whether r carries "Authorization: Bearer TOKEN" with this
// token. The scheme is matched case-insensitively (RFC 9110 §11.1). The
// comparison takes the same time whatever the token sent, its length
// included: both sides are hashed with SHA-256 and the digests compared
// with subtle.ConstantTimeCompare. An empty token matches nothing.
func Match(r *http.Request, token string) bool {
	scheme, got, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if token == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// Require returns next guarded by Match: a request without the token gets
// 401 Unauthorized with "WWW-Authenticate: Bearer" and the JSON body
// {"error": "..."}, and never reaches next. An empty token refuses every
// request (fail closed): a caller that allows anonymous access does not
// wrap its handler.
func Require(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Match(r, token) {
			next.ServeHTTP(w, r)
			return
		}
		msg := "this endpoint needs the token: send the header Authorization: Bearer TOKEN"
		if r.Header.Get("Authorization") != "" {
			msg = "the token in the Authorization header is not the one configured"
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="gobridge"`)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	})
}
