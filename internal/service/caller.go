package service

import (
	"context"

	"github.com/codecage/codecage/internal/service/event"
)

// Callers live in the event leaf; these names keep the surfaces' spelling.
const (
	SurfaceREST     = event.SurfaceREST
	SurfaceMCP      = event.SurfaceMCP
	SurfaceMCPStdio = event.SurfaceMCPStdio
	SurfaceCLI      = event.SurfaceCLI
	SurfaceE2B      = event.SurfaceE2B
)

type (
	// Caller is event.Caller: who asks.
	Caller = event.Caller
	// Trace is event.Trace: what a request did, for its log line.
	Trace = event.Trace
)

// WithCaller returns ctx carrying c (event.WithCaller).
func WithCaller(ctx context.Context, c Caller) context.Context { return event.WithCaller(ctx, c) }

// CallerFrom returns the caller in ctx (event.CallerFrom).
func CallerFrom(ctx context.Context) (Caller, bool) { return event.CallerFrom(ctx) }
