// Package frontdoor holds what the HTTP surfaces (REST and MCP in
// internal/httpapi, E2B in internal/e2b) share at their door: the HTTP
// server's timeouts and header limit, listeners that cap open connections
// (in all and per client address) within the file descriptors left to
// sandboxes, and a response writer that remembers the status, for the
// request's log line and its count. It knows nothing of the service.
package frontdoor

import "net/http"

// Recorder remembers the status written through it; Unwrap lets
// http.ResponseController reach the connection (flushes for streams,
// deadlines).
type Recorder struct {
	http.ResponseWriter
	// Status is the status written, 0 while none is.
	Status int
}

// WriteHeader implements http.ResponseWriter.
func (r *Recorder) WriteHeader(code int) {
	if r.Status == 0 {
		r.Status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (r *Recorder) Write(b []byte) (int, error) {
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (r *Recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the writer underneath.
func (r *Recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
