package api

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

// The one body door: an announced or read size over the limit is too
// large (the announced one refused before a byte is read), a body within
// it comes back whole.
func TestReadBodyHoldsTheLimit(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
	r.ContentLength = 1 << 40
	if _, err := ReadBody(w, r, 64); !errors.Is(err, service.ErrTooLarge) || !strings.Contains(err.Error(), "SANDBOX_MAX_BODY_SIZE") || w.Header().Get("Connection") != "close" {
		t.Errorf("announced over the limit: %v, Connection %q", err, w.Header().Get("Connection"))
	}
	r = httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 65)))
	r.ContentLength = -1 // chunked: only reading finds out
	if _, err := ReadBody(httptest.NewRecorder(), r, 64); !errors.Is(err, service.ErrTooLarge) || StatusOf(err).REST != 413 {
		t.Errorf("read over the limit: %v", err)
	}
	r = httptest.NewRequest("POST", "/", strings.NewReader(`{"code": "1"}`))
	if body, err := ReadBody(httptest.NewRecorder(), r, 64); err != nil || string(body) != `{"code": "1"}` {
		t.Errorf("within the limit: %q %v", body, err)
	}
}
