package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/codecage/codecage/internal/service"
)

// CheckLength refuses a body whose Content-Length is over limit (the
// operator's SANDBOX_MAX_BODY_SIZE) before a byte of it is read: a client
// announcing more is not waited for, and its connection is closed.
func CheckLength(w http.ResponseWriter, r *http.Request, limit int64) error {
	if r.ContentLength <= limit {
		return nil
	}
	w.Header().Set("Connection", "close") // the body is never read
	return refuse(service.ErrTooLarge, "the request body is %d bytes, over the limit of %d (SANDBOX_MAX_BODY_SIZE)", r.ContentLength, limit)
}

// ReadBody reads a request's whole body, at most limit bytes: the one
// door of the bodies every surface decodes (REST's JSON, E2B's control
// plane, interpreter and Connect calls). Over the limit is
// service.ErrTooLarge, a body the client broke service.ErrInvalidRequest;
// each transport answers them from its row of the status table. The
// text of the JSON in it is checked by CheckJSONText, once it is decoded
// as far as the transport needs (Connect inflates it first).
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if err := CheckLength(w, r, limit); err != nil {
		return nil, err
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var big *http.MaxBytesError
		if errors.As(err, &big) {
			return nil, refuse(service.ErrTooLarge, "the request body is larger than the limit of %d bytes (SANDBOX_MAX_BODY_SIZE)", limit)
		}
		if errors.Is(err, service.ErrShuttingDown) { // cut by the drain
			return nil, err
		}
		return nil, refuse(service.ErrInvalidRequest, "the request body could not be read: %v", err)
	}
	return body, nil
}

// refusal is an error with a text of its own, classified by the service's
// sentinel it unwraps to (its words are not repeated in the text).
type refusal struct {
	msg  string
	kind error
}

func refuse(kind error, format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...), kind: kind}
}

func (e *refusal) Error() string { return e.msg }

func (e *refusal) Unwrap() error { return e.kind }
