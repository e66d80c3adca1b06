package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/service"
)

// Each tool error names its category once, keeps the service's advice,
// and still unwraps to the service's sentinel.
func TestToolErrorSaysTheCategoryOnce(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: unknown profile \"gpu\"", service.ErrInvalidRequest), `invalid request: unknown profile "gpu"`},
		{fmt.Errorf("%w: %q escapes the workspace", service.ErrBadPath, "../x"), `invalid request: bad path: "../x" escapes the workspace`},
		{fmt.Errorf("%w: all 32 sandboxes are in use", service.ErrBusy), "busy: all 32 sandboxes are in use"},
		{&access.DeniedError{Err: access.ErrQueueFull, Msg: "server busy: no slot freed within 10s", RetryAfter: time.Second}, "busy: no slot freed within 10s (retry after 1s)"},
		{&access.DeniedError{Err: access.ErrRateLimited, Msg: "rate limit of 1 requests per second (burst 1) reached; retry in 0.5s", RetryAfter: time.Second / 2},
			"rate limited: rate limit of 1 requests per second (burst 1) reached; retry in 0.5s (retry after 1s)"},
		{fmt.Errorf("%w: %q", service.ErrSessionNotFound, "s1"), `session not found: "s1"`},
		{context.Canceled, "canceled"},
	}
	for _, c := range cases {
		got := toolError(c.err)
		if got.Error() != c.want {
			t.Errorf("toolError(%q) = %q, want %q", c.err, got, c.want)
		}
		if service.ErrorKind(got) != service.ErrorKind(c.err) && !errors.Is(c.err, context.Canceled) {
			t.Errorf("%q: kind %s, want %s", got, service.ErrorKind(got), service.ErrorKind(c.err))
		}
	}
}
