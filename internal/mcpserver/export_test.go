package mcpserver

import "net/http"

// IDMapsHeld is how many session id maps an HTTP handler from
// HTTPHandlers holds.
func IDMapsHeld(h http.Handler) int { return h.(*idHandler).sessions.len() }

// SetMaxOutstandingIDs sets the per-session cap for a test.
func SetMaxOutstandingIDs(n int) (restore func()) {
	old := MaxOutstandingIDs
	MaxOutstandingIDs = n
	return func() { MaxOutstandingIDs = old }
}
