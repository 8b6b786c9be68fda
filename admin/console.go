package admin

import (
	_ "embed"
	"net/http"
)

// consoleHTML is the whole console: one page, inline CSS and JS, no
// external resources.
//
//go:embed console.html
var consoleHTML []byte

func (h *Handler) console(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:")
	w.Header().Set("X-Frame-Options", "DENY")
	_, _ = w.Write(consoleHTML)
}
