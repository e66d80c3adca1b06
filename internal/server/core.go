package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/audit"
	"github.com/codecage/codecage/internal/cluster"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/frontdoor"
	"github.com/codecage/codecage/internal/httpapi"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/metrics"
	"github.com/codecage/codecage/internal/service"
)

// core is the service and what it is built with; close undoes it.
type core struct {
	svc     *service.Service
	node    *cluster.Node // nil: a single server
	replica string        // this replica's name, in a cluster
	undo    []func()      // run in reverse by close
}

// startCore connects the upstream tools, joins the cluster and starts the
// service with both: they are its options, fixed before it takes requests.
func startCore(cfg config.Config, store auditStore, log *slog.Logger) (*core, error) {
	c := &core{}
	up, gateways, stopUpstream, err := StartUpstream(cfg, log)
	if err != nil {
		return nil, usage(err)
	}
	c.undo = append(c.undo, stopUpstream)
	node, err := joinCluster(cfg, store, log)
	if err != nil {
		c.close()
		return nil, usage(err)
	}
	opts := &service.Options{Log: log, Upstream: up, Gateways: gateways}
	if node != nil {
		c.node, c.replica, opts.Cluster = node, node.Name(), node
		c.undo = append(c.undo, func() { // for an early return; harmless after leave
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = node.Leave(ctx)
		})
	}
	svc, err := service.New(cfg, opts)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("%w (run \"codecage doctor\")", err)
	}
	c.svc = svc
	c.undo = append(c.undo, svc.Close)
	if node != nil {
		log.Info("joined the cluster", "replica", node.Self(), "name", node.Name(), "url", cfg.ReplicaURL, "peers", len(node.Peers(context.Background())))
	}
	return c, nil
}

func (c *core) close() {
	for i := len(c.undo) - 1; i >= 0; i-- {
		c.undo[i]()
	}
}

// leave records this replica's stop, so that the other replicas take its
// parked sessions over, or, when it parks none, answer "session lost" for
// them rather than forwarding into the drain. Until then, a request for
// one of its sessions elsewhere is answered "unavailable": it does not
// answer while it drains and parks.
func (c *core) leave(log *slog.Logger) {
	if c.node == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.node.Leave(ctx); err != nil {
		log.Warn("replica registry: could not record this replica's stop", "err", err)
	}
}

// handlers builds the metrics and the REST handler (MCP over HTTP, and the
// cluster's internal API, inside), and sets the service's observers.
func handlers(cfg config.Config, c *core, keys *access.Keys, rec *audit.Recorder, store auditStore, log *slog.Logger) (http.Handler, *metrics.Metrics) {
	var internal http.Handler
	if c.node != nil {
		internal = c.node.Handler(c.svc, 2*cfg.MaxBodySize+1<<20, cfg.StreamWriteTimeout)
	}
	m := metrics.New(c.svc)
	m.AuditCounters(rec.Written, rec.Dropped, rec.Errors)
	c.svc.SetObserver(service.Observers{m, auditObserver{rec: rec, code: cfg.AuditCode, replica: c.replica}, logObserver{log}})
	streamable, sse := mcpserver.HTTPHandlers(c.svc, mcpserver.Options{Config: cfg, Log: log}, c.node != nil)
	api := httpapi.New(c.svc, httpapi.Options{
		Keys: keys, Metrics: m, Log: log, MCP: streamable, MCPSSE: sse, Version: mcpserver.Version, Internal: internal, Config: cfg,
		Ready: func(ctx context.Context) map[string]string {
			return map[string]string{"audit_log": auditReadiness(ctx, store, rec)}
		},
	})
	if c.node == nil {
		return api, m
	}
	// Which replica answered: for operators and load-balancer tests (a
	// forwarded session call names the one it reached).
	replica := c.replica
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Codecage-Replica", replica)
		api.ServeHTTP(w, r)
	}), m
}

// serveE2B serves the E2B SDKs' API on addr, behind the same door as
// REST's: E2B's streams (process output, runCode) clear the write timeout,
// as REST's event streams do.
func serveE2B(cfg config.Config, svc *service.Service, keys *access.Keys, m *metrics.Metrics, addr string, door frontdoor.Settings, bodies *frontdoor.Bodies, log *slog.Logger, stdout io.Writer) (*http.Server, error) {
	el, err := frontdoor.Listen("e2b", addr, door, log, m.ConnectionRefused)
	if err != nil {
		return nil, usage(fmt.Errorf("--e2b-listen: %w", err))
	}
	m.OpenConnections("e2b", el.Open)
	srv := frontdoor.NewServer(bodies.Wrap(e2b.New(svc, e2b.Options{Keys: keys, Secret: []byte(cfg.PeerSecret), Metrics: m, Log: log,
		Domain: e2bDomain(cfg.E2BDomain, el.Addr()), Config: cfg})), door, log)
	go func() { _ = srv.Serve(el) }()
	log.Info("serving the E2B API", "addr", el.Addr().String(), "hint", "E2B_API_URL=E2B_SANDBOX_URL=http://"+el.Addr().String())
	fmt.Fprintf(stdout, "codecage serving the E2B API on http://%s (set E2B_API_URL and E2B_SANDBOX_URL to it)\n", el.Addr())
	return srv, nil
}

// e2bDomain is the domain of the E2B surface's sandbox hosts: the
// operator's, or localhost with the E2B listener's port, which browsers
// and curl resolve to loopback.
func e2bDomain(set string, addr net.Addr) string {
	if set != "" {
		return set
	}
	if ta, ok := addr.(*net.TCPAddr); ok {
		return "localhost:" + strconv.Itoa(ta.Port)
	}
	return "localhost"
}
