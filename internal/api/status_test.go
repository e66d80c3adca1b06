package api

import (
	"context"
	"fmt"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

// Every kind the service classifies has an answer on every transport, and
// the table holds no kind the service does not classify: a new kind
// cannot silently become a 500 somewhere.
func TestEveryKindHasAStatusOnEveryTransport(t *testing.T) {
	known := map[string]bool{}
	for _, kind := range service.Kinds {
		known[kind] = true
		st, ok := statuses[kind]
		if !ok {
			t.Errorf("%s: no row", kind)
			continue
		}
		if st.REST == 0 || st.E2B == 0 || st.Envd == 0 || st.Connect == 0 {
			t.Errorf("%s: an empty cell: %+v", kind, st)
		}
	}
	for kind := range statuses {
		if !known[kind] {
			t.Errorf("%s: a row for a kind service.Kinds does not list", kind)
		}
	}
}

// KindError is ErrorKind's exact inverse, so a failure rebuilt from its
// kind (a forwarded request's) is answered as if it had happened here.
func TestKindErrorIsErrorKindsInverse(t *testing.T) {
	for _, kind := range service.Kinds {
		if got := service.ErrorKind(fmt.Errorf("wrapped: %w", service.KindError(kind))); got != kind {
			t.Errorf("ErrorKind(KindError(%s)) = %s", kind, got)
		}
	}
}

// A client that went away is not the server's failure on any transport.
func TestCanceledIsNotAServerError(t *testing.T) {
	for _, err := range []error{context.Canceled, context.DeadlineExceeded} {
		st := StatusOf(fmt.Errorf("run: %w", err))
		if st.REST != Canceled || st.E2B != Canceled || st.Envd != Canceled || st.Connect.String() != "canceled" || st.MCP != "canceled" {
			t.Errorf("%v: %+v", err, st)
		}
	}
}
