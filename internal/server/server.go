// Package server is the composition root of codecage serve and codecage
// mcp: it opens the audit log, starts the service with its upstream tools
// and its cluster, builds the metrics and every surface's handler, listens,
// and shuts down in order. The cli package parses flags and calls it.
package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/frontdoor"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// Options are what the command line gives the server besides the
// configuration.
type Options struct {
	Log    *slog.Logger // required
	Stdout io.Writer    // where the server says it listens (serve), or MCP's frames (stdio); nil: nowhere
	Stdin  io.Reader    // MCP's frames in (ServeStdio)
}

// UsageError is a failure the operator fixes in the configuration (a bad
// setting, an address taken): codecage exits with its usage status.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usage(err error) error { return &UsageError{err} }

// Run serves the REST API, MCP over streamable HTTP (/mcp) and SSE
// (/mcp/sse), metrics and health on cfg.Listen, and the E2B API on
// cfg.E2BListen when set, until ctx ends; then it shuts down within
// cfg.ShutdownGrace.
func Run(ctx context.Context, cfg config.Config, opts Options) error {
	log, stdout := opts.Log, opts.Stdout
	if stdout == nil {
		stdout = io.Discard
	}
	keys, addrs, err := settle(&cfg, log)
	if err != nil {
		return err
	}
	rec, store, auditPath, err := openAuditLog(cfg, log)
	if err != nil {
		return err
	}
	defer closeAudit(rec, store, log)
	c, err := startCore(cfg, store, log)
	if err != nil {
		return err
	}
	defer c.close()
	handler, m := handlers(cfg, c, keys, rec, store, log)
	door := doorSettings(cfg, addrs.e2b != "", log)
	l, err := frontdoor.Listen("rest", addrs.rest, door, log, m.ConnectionRefused)
	if err != nil {
		return usage(err)
	}
	m.OpenConnections("rest", l.Open)
	// The drain cuts the uploads still arriving at its grace.
	bodies := frontdoor.NewBodies(fmt.Errorf("%w: the request body was still arriving at the end of the shutdown grace (SANDBOX_SHUTDOWN_GRACE), and was cut", service.ErrShuttingDown))
	srvs := []*http.Server{}
	if addrs.e2b != "" {
		e2bSrv, err := serveE2B(cfg, c.svc, keys, m, addrs.e2b, door, bodies, log, stdout)
		if err != nil {
			return err
		}
		defer e2bSrv.Close()
		srvs = append(srvs, e2bSrv)
	}
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := frontdoor.NewServer(bodies.Wrap(handler), door, log)
	srvs = append(srvs, srv)
	srv.BaseContext = func(net.Listener) context.Context { return base }
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	log.Info("codecage serving", "addr", l.Addr().String(), "keys", keys.Len(), "rate_limit", rateText(cfg, keys.Len()),
		"max_concurrent", cfg.MaxConcurrent, "queue", cfg.QueueSize, "max_connections", door.MaxConns, "max_connections_per_client", door.MaxConnsPerClient, "queue_timeout", cfg.QueueTimeout.String(), "audit_db", auditPath,
		"rest", "/execute", "docs", "/docs", "mcp", "/mcp", "sse", "/mcp/sse", "metrics", "/metrics")
	fmt.Fprintf(stdout, "codecage serving on http://%s (REST at /, docs at /docs, MCP at /mcp, SSE at /mcp/sse)\n", l.Addr())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	if !cfg.ParkOnShutdown {
		c.leave(log) // the other replicas answer "session lost" at once
	}
	shutdown(srvs, bodies, c.svc, cancelBase, cfg.ShutdownGrace, log)
	// Parked sessions are in the store now: once this replica is marked
	// stopped, the others take them over.
	c.leave(log)
	return nil
}

// addresses are where the listeners bind.
type addresses struct{ rest, e2b string }

// settle checks the keys, the listeners' addresses and the cluster
// settings, and settles what follows from them in cfg: E2B's bash, the
// callers' limits.
func settle(cfg *config.Config, log *slog.Logger) (*access.Keys, addresses, error) {
	var a addresses
	keys, err := loadKeys(*cfg)
	if err != nil {
		return nil, a, usage(err)
	}
	if a.rest, err = bindAddress(cfg.Listen, keys.Len() > 0); err != nil {
		return nil, a, usage(err)
	}
	if cfg.E2BListen != "" {
		if a.e2b, err = bindAddress(cfg.E2BListen, keys.Len() > 0); err != nil {
			return nil, a, usage(fmt.Errorf("--e2b-listen: %w", err))
		}
		// E2B's SDKs run every command as /bin/bash -l -c CMD, and agents
		// expect a shell's usual programs.
		cfg.AllowedCommands = policy.WithE2BCommands(cfg.AllowedCommands)
		if cfg.Kernels == nil {
			// E2B's code interpreter runs JavaScript, TypeScript and bash.
			cfg.Kernels = []string{"javascript", "typescript", "bash"}
		}
		if !cfg.EnableFilesystem {
			log.Warn("the E2B surface is on but the filesystem profile is off: code written for E2B usually imports os; set SANDBOX_ENABLE_FILESYSTEM=true to allow it")
		}
	}
	if err := checkClusterConfig(*cfg); err != nil {
		return nil, a, usage(err)
	}
	cfg.ResolveCallerLimits(keys.Len() > 0)
	cfg.ResolveKeyShares(keys.Len())
	if a.rest != cfg.Listen {
		log.Warn("no API keys configured: listening on loopback only; set SANDBOX_API_KEYS (or SANDBOX_API_KEYS_FILE) to serve beyond this host", "asked", cfg.Listen, "listen", a.rest)
	} else if keys.Len() == 0 {
		log.Info("no API keys configured: anyone on this host can call the server; set SANDBOX_API_KEYS to require keys")
	}
	return keys, a, nil
}
