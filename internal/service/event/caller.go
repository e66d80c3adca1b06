package event

import "context"

// Surfaces name where a request came from.
const (
	SurfaceREST     = "rest"
	SurfaceMCP      = "mcp"       // MCP over streamable HTTP or SSE
	SurfaceMCPStdio = "mcp-stdio" // MCP over stdio
	SurfaceCLI      = "cli"
	SurfaceE2B      = "e2b" // the E2B SDKs' protocol
)

// Caller is who asks, for limits, ownership and the audit log.
type Caller struct {
	// Key is the API key's name; empty when the server has no keys.
	Key string
	// Surface is one of the Surface constants.
	Surface string
	// RemoteAddr is the client's address, when known.
	RemoteAddr string
	// Trace, when set, receives the ids of the executions the request ran,
	// so that the surface can log them with the request.
	Trace *Trace
}

// Trace collects what a request did, for its log line.
type Trace struct {
	ExecutionID string
}

type callerKey struct{}

// WithCaller returns ctx carrying c. Requests with a caller are admitted
// through the service's rate and concurrency limits; in-process callers
// without one (the CLI, benchmarks) are not.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller in ctx.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}
