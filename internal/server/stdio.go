package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/service"
)

// ServeStdio serves MCP over opts.Stdin and opts.Stdout (protocol frames
// only; logs go to opts.Log) until the client closes stdin or ctx ends.
func ServeStdio(ctx context.Context, cfg config.Config, opts Options) error {
	log := opts.Log
	observers := service.Observers{logObserver{log}}
	// An MCP client starts this command itself: a log it cannot open is
	// reported, not fatal (serve, run by an operator, refuses to start).
	if rec, store, path, err := openAuditLog(cfg, log); err != nil {
		log.Error("running without an audit log", "err", err)
	} else {
		defer closeAudit(rec, store, log)
		observers = append(observers, auditObserver{rec: rec, code: cfg.AuditCode})
		log.Debug("audit log", "path", path)
	}
	up, gateways, stopUpstream, err := StartUpstream(cfg, log)
	if err != nil {
		return usage(err)
	}
	defer stopUpstream()
	svc, err := service.New(cfg, &service.Options{Log: log, Observer: observers, Upstream: up, Gateways: gateways})
	if err != nil {
		return fmt.Errorf("%w (run \"codecage doctor\")", err)
	}
	defer svc.Close()
	t := mcpserver.Stdio(opts.Stdin, opts.Stdout, log)
	if err := mcpserver.New(svc, mcpserver.Options{Config: cfg, Log: log}).Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
