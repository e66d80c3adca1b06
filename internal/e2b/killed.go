package e2b

import (
	"context"
	"errors"
	"net/http"

	"github.com/codecage/codecage/internal/service"
)

// A sandbox killed (or at its end of life) while a request streams from
// it: in E2B the VM goes and the connection with it, and the SDKs, seeing
// the stream break, check the sandbox and raise their TimeoutError ("the
// sandbox was killed"). Here the answer breaks the same way, rather than
// ending with an in-band error or an exit status the SDK would report as
// the code's or the command's own. The service says so with
// ErrSessionGone (a run, a process); a watch asks.

// sandboxGone reports whether ref's sandbox has ended (killed, timed out).
// ctx is the request's, still live: its stream ended without its client.
func (s *Server) sandboxGone(ctx context.Context, ref sandboxRef) bool {
	_, err := s.svc.GetSession(ctx, ref.id, ref.owner)
	return errors.Is(err, service.ErrSessionNotFound) || errors.Is(err, service.ErrSessionLost)
}

// breakStream drops the connection of the answer in progress: net/http
// closes it without ending the body.
func breakStream() { panic(http.ErrAbortHandler) }
