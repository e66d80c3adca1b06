package e2b

import (
	"bytes"
	"io"
	"net/http"

	"github.com/codecage/codecage/internal/api"
)

// admitBody is the door of the plain HTTP routes (the control plane, the
// code interpreter), as REST's: a body over SANDBOX_MAX_BODY_SIZE is a 413
// (at once when its Content-Length says so, before anything is read), a
// body the client broke is a 400, and text that is not valid Unicode is
// refused naming its field instead of being replaced by U+FFFD. It
// reports whether the request goes on; the body is then in memory, for
// the route. (envd's Connect procedures have connectDoor; file uploads
// their own, larger, limit.)
func (s *Server) admitBody(w http.ResponseWriter, r *http.Request) bool {
	body, err := api.ReadBody(w, r, s.cfg.MaxBodySize)
	if err == nil {
		err = api.CheckJSONText(body)
	}
	if err != nil {
		// Both ports refuse a body as the control plane does (413, 400).
		writeAPIError(w, api.StatusOf(err).E2B, err.Error())
		return false
	}
	if body != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return true
}
