package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// shutdown stops accepting connections, lets running executions finish
// within the grace period, cancels the rest (their sandboxes are killed and
// their clients told so), tears every sandbox down, then ends the streams
// left (MCP) and closes the connections. The audit log is flushed after,
// by the caller.
func shutdown(srv *http.Server, svc *service.Service, cancelBase context.CancelFunc, grace time.Duration, log *slog.Logger) {
	log.Info("shutting down", "grace", grace.String(), "running", svc.Running())
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	// Answers to cancelled executions still need writing after the grace.
	answered, cancelAnswered := context.WithTimeout(context.Background(), grace+15*time.Second)
	defer cancelAnswered()
	closed := make(chan error, 1)
	go func() { closed <- srv.Shutdown(answered) }()
	if err := svc.Shutdown(ctx); err != nil {
		log.Warn("executions still running at the end of the grace period were canceled")
	}
	cancelBase() // long-lived streams (MCP) end now
	if err := <-closed; err != nil {
		log.Warn("connections still open; closing them", "err", err)
		_ = srv.Close()
	}
	log.Info("stopped")
}
