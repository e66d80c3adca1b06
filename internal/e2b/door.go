package e2b

import (
	"bytes"
	"errors"
	"fmt"
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
	limit := s.svc.Config().MaxBodySize
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close") // the body is never read
		writeAPIError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("the request body is %d bytes, over the limit of %d (SANDBOX_MAX_BODY_SIZE)", r.ContentLength, limit))
		return false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var big *http.MaxBytesError
		if errors.As(err, &big) {
			writeAPIError(w, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("the request body is larger than the limit of %d bytes (SANDBOX_MAX_BODY_SIZE)", limit))
		} else {
			writeAPIError(w, http.StatusBadRequest, "the request body could not be read: "+err.Error())
		}
		return false
	}
	if err := api.CheckJSONText(body); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}
