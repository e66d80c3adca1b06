package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// guard is the first middleware of every MCP server, on every transport:
// a request a client shapes to trip the SDK must cost it an error, never
// the server. `"arguments": null` made the SDK's defaults code write into
// a nil map, a panic that ended the whole process; it is read as no
// arguments. Any other panic below becomes an internal error of that call,
// logged with its stack.
func guard(log *slog.Logger) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
				if a := bytes.TrimSpace(r.Params.Arguments); len(a) == 0 || bytes.Equal(a, []byte("null")) {
					r.Params.Arguments = []byte("{}")
				}
			}
			defer func() {
				if p := recover(); p != nil {
					log.Error("mcp: a request panicked", "method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
					res, err = nil, fmt.Errorf("internal error while handling %s", method)
				}
			}()
			return next(ctx, method, req)
		}
	}
}
