package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/frontdoor"
	"github.com/codecage/codecage/internal/service"
)

// answerBound is how long after the grace the answers to cancelled
// requests may take to be written; then every connection left is closed
// (a download whose client stopped reading, an answer no one takes).
const answerBound = 5 * time.Second

// shutdown drains the server within bounds of its own, whatever its
// clients do. It stops accepting connections on every listener, and lets
// the requests in progress run for the grace. At the grace, it cuts the
// request bodies still arriving (an upload trickled in fails there) and
// the service cancels what still runs (its sandboxes are killed, its
// clients told so); answerBound later it closes every connection left.
// The service then parks its sessions (within a bound of its own) and
// tears every sandbox down; long-lived streams (MCP) end. The audit log is
// flushed after, by the caller.
func shutdown(srvs []*http.Server, bodies *frontdoor.Bodies, svc *service.Service, cancelBase context.CancelFunc, grace time.Duration, log *slog.Logger) {
	log.Info("shutting down", "grace", grace.String(), "running", svc.Running())
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	answered, cancelAnswered := context.WithTimeout(context.Background(), grace+answerBound)
	defer cancelAnswered()
	var closed sync.WaitGroup
	for _, srv := range srvs {
		closed.Go(func() {
			if err := srv.Shutdown(answered); err != nil {
				_ = srv.Close()
			}
		})
	}
	stopCut := context.AfterFunc(ctx, bodies.Cut)
	defer stopCut()
	if err := svc.Shutdown(ctx); err != nil {
		log.Warn("executions still running at the end of the grace period were canceled")
	}
	cancelBase() // long-lived streams (MCP) end now
	closed.Wait()
	log.Info("stopped")
}
