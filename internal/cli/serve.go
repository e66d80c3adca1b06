package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/audit"
	"github.com/codecage/codecage/internal/cluster"
	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/frontdoor"
	"github.com/codecage/codecage/internal/httpapi"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/metrics"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/sandbox"
)

// mcpCmd serves MCP over stdio: protocol frames only on stdout, logs on
// stderr.
func mcpCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := addConfigFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	cfg, ok := loadConfig(cf, stderr, "mcp")
	if !ok {
		return exitUsage
	}
	log := newLogger(cfg, stderr)
	observers := sandbox.Observers{logObserver{log}}
	// An MCP client starts this command itself: a log it cannot open is
	// reported, not fatal (serve, run by an operator, refuses to start).
	if rec, store, path, err := openAuditLog(cfg, log); err != nil {
		log.Error("running without an audit log", "err", err)
	} else {
		defer closeAudit(rec, store, log)
		observers = append(observers, auditObserver{rec: rec, code: cfg.AuditCode})
		log.Debug("audit log", "path", path)
	}
	up, stopUpstream, err := startUpstream(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "codecage mcp:", err)
		return exitUsage
	}
	defer stopUpstream()
	svc, code := startService(cfg, &sandbox.Options{Log: log, Observer: observers, Upstream: up}, stderr, "mcp")
	if svc == nil {
		return code
	}
	defer svc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	server := mcpserver.New(svc, log)
	t := mcpserver.Stdio(stdin, stdout, log)
	if err := server.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		fmt.Fprintln(stderr, "codecage mcp:", err)
		return exitInternal
	}
	return exitOK
}

// serveCmd serves the REST API, MCP over streamable HTTP (/mcp) and SSE
// (/mcp/sse), metrics and health on one listener, until SIGTERM.
func serveCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := addConfigFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	cfg, ok := loadConfig(cf, stderr, "serve")
	if !ok {
		return exitUsage
	}
	log := newLogger(cfg, stderr)
	listen, e2bListen := &cfg.Listen, &cfg.E2BListen // --listen, --e2b-listen: settings, so a --config file sets them too
	keys, err := loadKeys(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitUsage
	}
	addr, err := bindAddress(*listen, keys.Len() > 0)
	if err != nil {
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitUsage
	}
	e2bAddr := ""
	if *e2bListen != "" {
		if e2bAddr, err = bindAddress(*e2bListen, keys.Len() > 0); err != nil {
			fmt.Fprintln(stderr, "codecage serve: --e2b-listen:", err)
			return exitUsage
		}
		// E2B's SDKs run every command as /bin/bash -l -c CMD.
		if !slices.Contains(cfg.AllowedCommands, "bash") {
			cfg.AllowedCommands = append(cfg.AllowedCommands, "bash")
		}
		if !cfg.EnableFilesystem {
			log.Warn("the E2B surface is on but the filesystem profile is off: code written for E2B usually imports os; set SANDBOX_ENABLE_FILESYSTEM=true to allow it")
		}
	}
	if err := checkClusterConfig(cfg); err != nil {
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitUsage
	}
	cfg.ResolveCallerLimits(keys.Len() > 0)
	if addr != *listen {
		log.Warn("no API keys configured: listening on loopback only; set SANDBOX_API_KEYS (or SANDBOX_API_KEYS_FILE) to serve beyond this host", "asked", *listen, "listen", addr)
	} else if keys.Len() == 0 {
		log.Info("no API keys configured: anyone on this host can call the server; set SANDBOX_API_KEYS to require keys")
	}
	rec, store, auditPath, err := openAuditLog(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitInternal
	}
	defer closeAudit(rec, store, log)
	up, stopUpstream, err := startUpstream(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitUsage
	}
	defer stopUpstream()
	node, err := joinCluster(cfg, store, log)
	if err != nil {
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitUsage
	}
	replica := ""
	opts := &sandbox.Options{Log: log, Upstream: up}
	if node != nil {
		opts.Cluster = node
		replica = node.Name()
		defer func() { // for an early return; harmless after the Leave below
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = node.Leave(ctx)
		}()
	}
	svc, code := startService(cfg, opts, stderr, "serve")
	if svc == nil {
		return code
	}
	defer svc.Close()
	var internal http.Handler
	if node != nil {
		internal = node.Handler(svc, 2*cfg.MaxBodySize+1<<20)
		log.Info("joined the cluster", "replica", node.Self(), "name", node.Name(), "url", cfg.ReplicaURL, "peers", len(node.Peers(context.Background())))
	}
	m := metrics.New(svc)
	m.AuditCounters(rec.Written, rec.Dropped, rec.Errors)
	svc.SetObserver(sandbox.Observers{m, auditObserver{rec: rec, code: cfg.AuditCode, replica: replica}, logObserver{log}})

	streamable, sse := mcpserver.HTTPHandlers(svc, log, node != nil)
	api := httpapi.New(svc, httpapi.Options{
		Keys: keys, Metrics: m, Log: log, MCP: streamable, MCPSSE: sse, Version: mcpserver.Version, Internal: internal,
		Ready: func(ctx context.Context) map[string]string {
			return map[string]string{"audit_log": auditReadiness(ctx, store, rec)}
		},
	})
	var handler http.Handler = api
	if node != nil {
		// Which replica answered: for operators and load-balancer tests
		// (a forwarded session call names the one it reached).
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Codecage-Replica", replica)
			api.ServeHTTP(w, r)
		})
	}
	door := doorSettings(cfg, e2bAddr != "", log)
	l, err := frontdoor.Listen("rest", addr, door, log, m.ConnectionRefused)
	if err != nil {
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitUsage
	}
	m.OpenConnections("rest", l.Open)
	var e2bSrv *http.Server
	if e2bAddr != "" {
		el, err := frontdoor.Listen("e2b", e2bAddr, door, log, m.ConnectionRefused)
		if err != nil {
			fmt.Fprintln(stderr, "codecage serve: --e2b-listen:", err)
			return exitUsage
		}
		m.OpenConnections("e2b", el.Open)
		// The same door as REST's: E2B's streams (process output, runCode)
		// clear the write timeout, as REST's event streams do.
		e2bSrv = frontdoor.NewServer(e2b.New(svc, e2b.Options{Keys: keys, Secret: []byte(cfg.PeerSecret), Metrics: m, Log: log}), door, log)
		go func() { _ = e2bSrv.Serve(el) }()
		defer e2bSrv.Close()
		log.Info("serving the E2B API", "addr", el.Addr().String(), "hint", "E2B_API_URL=E2B_SANDBOX_URL=http://"+el.Addr().String())
		fmt.Fprintf(stdout, "codecage serving the E2B API on http://%s (set E2B_API_URL and E2B_SANDBOX_URL to it)\n", el.Addr())
	}
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := frontdoor.NewServer(handler, door, log)
	srv.BaseContext = func(net.Listener) context.Context { return base }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	log.Info("codecage serving", "addr", l.Addr().String(), "keys", keys.Len(), "rate_limit", rateText(cfg, keys.Len()),
		"max_concurrent", cfg.MaxConcurrent, "queue", cfg.QueueSize, "max_connections", door.MaxConns, "max_connections_per_client", door.MaxConnsPerClient, "queue_timeout", cfg.QueueTimeout.String(), "audit_db", auditPath,
		"rest", "/execute", "docs", "/docs", "mcp", "/mcp", "sse", "/mcp/sse", "metrics", "/metrics")
	fmt.Fprintf(stdout, "codecage serving on http://%s (REST at /, docs at /docs, MCP at /mcp, SSE at /mcp/sse)\n", l.Addr())
	select {
	case err := <-served:
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitInternal
	case <-ctx.Done():
	}
	stop()
	if node != nil {
		// First, so that the other replicas answer "session lost" for
		// this one's sessions rather than forwarding into the drain.
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := node.Leave(lctx); err != nil {
			log.Warn("replica registry: could not record this replica's stop", "err", err)
		}
		cancel()
	}
	if e2bSrv != nil {
		go func() { _ = e2bSrv.Shutdown(context.Background()) }()
	}
	shutdown(srv, svc, cancelBase, cfg.ShutdownGrace, log)
	return exitOK
}

// doorSettings are the listeners' timeouts and connection caps, the caps
// lowered to fit half the open-file limit (raised to its hard limit first)
// so that a flood of connections leaves the sandboxes their descriptors.
func doorSettings(cfg policy.Config, withE2B bool, log *slog.Logger) frontdoor.Settings {
	listeners := 1
	if withE2B {
		listeners = 2
	}
	fds := frontdoor.RaiseFileLimit()
	door := frontdoor.WithinFileLimit(frontdoor.SettingsFrom(cfg), listeners, fds)
	if door.MaxConns < cfg.MaxConnections {
		log.Warn("the open-file limit lowers SANDBOX_MAX_CONNECTIONS (half of it is kept for sandboxes); raise the limit (ulimit -n, LimitNOFILE=) to allow more",
			"open_file_limit", fds, "max_connections", door.MaxConns, "asked", cfg.MaxConnections)
	}
	return door
}

// shutdown stops accepting connections, lets running executions finish
// within the grace period, cancels the rest (their sandboxes are killed and
// their clients told so), tears every sandbox down, then ends the streams
// left (MCP) and closes the connections. The audit log is flushed after,
// by the caller.
func shutdown(srv *http.Server, svc *sandbox.Service, cancelBase context.CancelFunc, grace time.Duration, log *slog.Logger) {
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

// loadKeys reads SANDBOX_API_KEYS and SANDBOX_API_KEYS_FILE.
func loadKeys(cfg policy.Config) (*access.Keys, error) {
	keys, err := access.ParseKeys(cfg.APIKeys)
	if err != nil {
		return nil, fmt.Errorf("SANDBOX_API_KEYS: %w", err)
	}
	if cfg.APIKeysFile != "" {
		more, err := access.LoadKeysFile(cfg.APIKeysFile)
		if err != nil {
			return nil, fmt.Errorf("SANDBOX_API_KEYS_FILE: %w", err)
		}
		if err := keys.Merge(more); err != nil {
			return nil, fmt.Errorf("SANDBOX_API_KEYS_FILE: %w", err)
		}
	}
	return keys, nil
}

// bindAddress returns where to listen: as asked, or, without API keys, the
// loopback address with the same port.
func bindAddress(listen string, haveKeys bool) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %v (want host:port, e.g. 127.0.0.1:8001)", listen, err)
	}
	if haveKeys || host == "localhost" {
		return listen, nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return listen, nil
	}
	return net.JoinHostPort("127.0.0.1", port), nil
}

// rateText says how callers are rate limited, for the startup line.
func rateText(cfg policy.Config, keys int) string {
	switch {
	case cfg.RateLimit == 0 && keys == 0:
		return "none (no API keys: one caller; bursts wait in the queue)"
	case cfg.RateLimit == 0:
		return "none"
	}
	return fmt.Sprintf("%g/s per key, burst %d", cfg.RateLimit, cfg.RateBurst)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// checkClusterConfig refuses a cluster setting that cannot work, before
// anything starts.
func checkClusterConfig(cfg policy.Config) error {
	switch {
	case cfg.ReplicaURL == "" && cfg.PeerSecret != "":
		return errors.New("SANDBOX_PEER_SECRET is set but SANDBOX_REPLICA_URL is not: set both to run as one replica of several")
	case cfg.ReplicaURL == "":
		return nil
	case !audit.IsPostgres(cfg.AuditDB):
		return errors.New("SANDBOX_REPLICA_URL needs a shared PostgreSQL: set SANDBOX_AUDIT_DB to a postgres:// URL (the replicas register there)")
	case len(cfg.PeerSecret) < cluster.MinSecret:
		return fmt.Errorf("SANDBOX_REPLICA_URL needs SANDBOX_PEER_SECRET, a secret of at least %d characters the replicas share", cluster.MinSecret)
	}
	return nil
}

// joinCluster joins the replicas registered in the shared PostgreSQL when
// SANDBOX_REPLICA_URL is set; nil when this server is a single one.
func joinCluster(cfg policy.Config, store auditStore, log *slog.Logger) (*cluster.Node, error) {
	pg, ok := store.(*audit.Postgres)
	if cfg.ReplicaURL == "" || !ok {
		return nil, nil // checkClusterConfig refused a replica URL without PostgreSQL
	}
	name := cfg.ReplicaName
	if name == "" {
		name, _ = os.Hostname()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cluster.Join(ctx, cluster.Config{Name: name, URL: cfg.ReplicaURL, Secret: cfg.PeerSecret, DB: pg.DB(), Log: log})
}
