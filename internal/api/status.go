package api

import (
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/service"
)

// Status is how each transport answers one kind of service error
// (service.ErrorKind): a row of the one table below.
type Status struct {
	// REST is the HTTP status of the problem document; RESTRetry sends
	// Retry-After (at least a second) even when the error names no wait.
	REST      int
	RESTRetry bool
	// E2B is the status of E2B's control plane (the api.e2b.dev calls:
	// create, list, connect, kill, timeout); E2BRetry sends Retry-After.
	E2B      int
	E2BRetry bool
	// Envd is the status of a sandbox's daemons over plain HTTP (/files,
	// the interpreter's /execute and contexts), as envd and E2B's proxy
	// send them: the SDK reads 502 as "the sandbox is not running".
	Envd int
	// Connect is the code of envd's Connect RPCs (filesystem, process).
	// The SDK maps InvalidArgument, NotFound and Unauthenticated to their
	// own error classes, Unavailable to "sandbox timed out" (not running),
	// Canceled and DeadlineExceeded to a timeout; the rest to SandboxError.
	Connect connect.Code
	// MCP is the category a tool error's text starts with ("busy: ..."),
	// so a model tells its own mistakes from the server's state; "" leaves
	// the service's message as it is.
	MCP string
}

// Canceled (499) is the status of a request whose client went away: nobody
// reads it, but the request log and the metrics must not count it as the
// server's failure (500).
const Canceled = 499

// statuses is the one table from error kind to each transport's answer.
// A difference between transports is a cell, with its reason beside it.
var statuses = map[string]Status{
	service.KindInvalidRequest: {REST: http.StatusBadRequest, E2B: http.StatusBadRequest, Envd: http.StatusBadRequest, Connect: connect.CodeInvalidArgument, MCP: "invalid request"},
	service.KindBadPath:        {REST: http.StatusBadRequest, E2B: http.StatusBadRequest, Envd: http.StatusBadRequest, Connect: connect.CodeInvalidArgument, MCP: "invalid request"},
	// A write to the sandbox's read-only system tree: envd's answer to
	// its own permission error (the SDK raises SandboxError).
	service.KindPermissionDenied: {REST: http.StatusForbidden, E2B: http.StatusForbidden, Envd: http.StatusForbidden, Connect: connect.CodePermissionDenied, MCP: "permission denied"},
	service.KindFileNotFound:     {REST: http.StatusNotFound, E2B: http.StatusNotFound, Envd: http.StatusNotFound, Connect: connect.CodeNotFound},
	// envd answers a write past the disk's room with 507.
	service.KindTooLarge: {REST: http.StatusRequestEntityTooLarge, E2B: http.StatusRequestEntityTooLarge, Envd: http.StatusInsufficientStorage, Connect: connect.CodeResourceExhausted},
	// To the E2B SDK a sandbox that is gone, lost or ended is "not
	// running": 404 from the control plane, 502 / Unavailable from its
	// daemons. REST tells them apart.
	service.KindSessionNotFound: {REST: http.StatusNotFound, E2B: http.StatusNotFound, Envd: http.StatusBadGateway, Connect: connect.CodeUnavailable},
	service.KindSessionLost:     {REST: http.StatusGone, E2B: http.StatusNotFound, Envd: http.StatusBadGateway, Connect: connect.CodeUnavailable},
	service.KindSessionEnded:    {REST: http.StatusConflict, E2B: http.StatusNotFound, Envd: http.StatusBadGateway, Connect: connect.CodeUnavailable},
	// Closed or at its end under the request: gone, as a lost one is. The
	// E2B surface breaks the stream instead where one is under way (the
	// SDK then checks the sandbox and raises "the sandbox was killed").
	service.KindSessionGone: {REST: http.StatusGone, E2B: http.StatusNotFound, Envd: http.StatusBadGateway, Connect: connect.CodeUnavailable, MCP: "session gone"},
	// A process or code context the sandbox does not have: envd's and
	// the code interpreter's 404.
	service.KindNotFound: {REST: http.StatusNotFound, E2B: http.StatusNotFound, Envd: http.StatusNotFound, Connect: connect.CodeNotFound, MCP: "not found"},
	// REST: a conflict with the caller's own open sessions; E2B: a
	// refusal for load, which its SDK retries.
	service.KindTooManySessions: {REST: http.StatusConflict, E2B: http.StatusTooManyRequests, E2BRetry: true, Envd: http.StatusTooManyRequests, Connect: connect.CodeResourceExhausted},
	// The caller's key holds its share of the sessions or watches: its
	// own to free, so REST's conflict as above; E2B's answer to a team at
	// its concurrent-sandbox limit is 429, with no Retry-After (waiting
	// frees nothing), so its SDK does not retry it.
	service.KindKeyLimit: {REST: http.StatusConflict, E2B: http.StatusTooManyRequests, Envd: http.StatusTooManyRequests, Connect: connect.CodeResourceExhausted, MCP: "key limit"},
	// A paused session is not running, to the E2B SDK's daemons (502);
	// a second pause is E2B's 409 ("already paused").
	service.KindSessionPaused:    {REST: http.StatusConflict, E2B: http.StatusConflict, Envd: http.StatusBadGateway, Connect: connect.CodeUnavailable, MCP: "session paused"},
	service.KindSnapshotNotFound: {REST: http.StatusNotFound, E2B: http.StatusNotFound, Envd: http.StatusNotFound, Connect: connect.CodeNotFound},
	service.KindSnapshotUnusable: {REST: http.StatusUnprocessableEntity, E2B: http.StatusBadRequest, Envd: http.StatusBadRequest, Connect: connect.CodeFailedPrecondition, MCP: "snapshot unusable"},
	// E2B's proxy answers a port nothing listens on with 502.
	service.KindPortClosed: {REST: http.StatusBadGateway, E2B: http.StatusBadGateway, Envd: http.StatusBadGateway, Connect: connect.CodeUnavailable, MCP: "port closed"},
	// Operators only (/environments): the key is known, not allowed.
	service.KindForbidden: {REST: http.StatusForbidden, E2B: http.StatusForbidden, Envd: http.StatusForbidden, Connect: connect.CodePermissionDenied, MCP: "forbidden"},
	// E2B answers a template it does not know with 404, an alias taken
	// with 409 and a template whose build failed with 400 (invalid template).
	service.KindEnvironmentNotFound: {REST: http.StatusNotFound, E2B: http.StatusNotFound, Envd: http.StatusNotFound, Connect: connect.CodeNotFound, MCP: "environment not found"},
	service.KindEnvironmentExists:   {REST: http.StatusConflict, E2B: http.StatusConflict, Envd: http.StatusConflict, Connect: connect.CodeAlreadyExists, MCP: "environment exists"},
	service.KindBuildFailed:         {REST: http.StatusUnprocessableEntity, E2B: http.StatusBadRequest, Envd: http.StatusBadRequest, Connect: connect.CodeFailedPrecondition, MCP: "build failed"},
	service.KindRateLimited:         {REST: http.StatusTooManyRequests, E2B: http.StatusTooManyRequests, E2BRetry: true, Envd: http.StatusTooManyRequests, Connect: connect.CodeResourceExhausted, MCP: "rate limited"},
	// envd has no 503 of its own for a full queue: 429, as for a rate.
	service.KindBusy:         {REST: http.StatusServiceUnavailable, RESTRetry: true, E2B: http.StatusServiceUnavailable, Envd: http.StatusTooManyRequests, Connect: connect.CodeUnavailable, MCP: "busy"},
	service.KindUnavailable:  {REST: http.StatusServiceUnavailable, E2B: http.StatusServiceUnavailable, Envd: http.StatusServiceUnavailable, Connect: connect.CodeUnavailable},
	service.KindShuttingDown: {REST: http.StatusServiceUnavailable, RESTRetry: true, E2B: http.StatusServiceUnavailable, Envd: http.StatusServiceUnavailable, Connect: connect.CodeUnavailable, MCP: "shutting down"},
	service.KindCanceled:     {REST: Canceled, E2B: Canceled, Envd: Canceled, Connect: connect.CodeCanceled, MCP: "canceled"},
	service.KindInternal:     {REST: http.StatusInternalServerError, E2B: http.StatusInternalServerError, Envd: http.StatusInternalServerError, Connect: connect.CodeInternal},
}

// StatusOf is how every transport answers err (nil: the internal row,
// never consulted for a success).
func StatusOf(err error) Status {
	return StatusOfKind(service.ErrorKind(err))
}

// StatusOfKind is the row of kind; a kind the table lacks is internal.
func StatusOfKind(kind string) Status {
	if st, ok := statuses[kind]; ok {
		return st
	}
	return statuses[service.KindInternal]
}

// RetryAfter is how long err asks the client to wait, in whole seconds (at
// least 1): what the limiter computed, else a second.
func RetryAfter(err error) int {
	if d := access.RetryAfter(err); d > 0 {
		return int(d / time.Second)
	}
	return 1
}
