// Package httpapi is codecage's REST surface (huma v2 on net/http, with an
// OpenAPI 3.1 document generated from the Go types) and the HTTP front
// door it shares with the MCP endpoints: API keys, body limits, request
// logs and metrics. Like every surface it holds no logic of its own: each
// route calls the sandbox service.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/httpapi/docs"
	"github.com/codecage/codecage/internal/metrics"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/streamwrite"
)

// Options configure a Server.
type Options struct {
	// Keys are the API keys; none means no authentication (the caller
	// then binds to loopback only).
	Keys *access.Keys
	// Metrics, when set, is served at /metrics and counts requests.
	Metrics *metrics.Metrics
	// Log receives one line per request.
	Log *slog.Logger
	// MCP and MCPSSE are the MCP handlers, mounted at /mcp and /mcp/sse
	// behind the same keys.
	MCP, MCPSSE http.Handler
	// Ready reports the readiness checks beyond the service's own: a name
	// per check, "" when it passes, else why not.
	Ready func(context.Context) map[string]string
	// Version is reported by /health and in the OpenAPI document.
	Version string
	// Internal serves /internal/: the calls other replicas of a cluster
	// forward, authenticated by their own shared secret, not API keys.
	Internal http.Handler
	// Config is the operator's configuration the service runs with: the
	// body and timeout limits, the stream write timeout, the queue.
	Config config.Config
}

// Server is the HTTP API.
type Server struct {
	svc     *service.Service
	cfg     config.Config
	keys    *access.Keys
	metrics *metrics.Metrics
	log     *slog.Logger
	ready   func(context.Context) map[string]string
	started time.Time
	version string
	mux     *http.ServeMux
	api     huma.API
	handler http.Handler
}

// New builds the API over svc.
func New(svc *service.Service, o Options) *Server {
	return newServer(svc, o.Config, o)
}

// Document returns the OpenAPI document of the API a server with this
// configuration serves (codecage openapi), without starting anything.
func Document(cfg config.Config, withKeys bool) *huma.OpenAPI {
	o := Options{}
	if withKeys {
		o.Keys, _ = access.ParseKeys("doc:0123456789abcdef")
	}
	return newServer(nil, cfg, o).OpenAPI()
}

func newServer(svc *service.Service, cfg config.Config, o Options) *Server {
	useProblems()
	s := &Server{svc: svc, cfg: cfg, keys: o.Keys, metrics: o.Metrics, log: o.Log, ready: o.Ready,
		started: time.Now(), version: o.Version, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.version == "" {
		s.version = "dev"
	}
	hc := huma.DefaultConfig("codecage", s.version)
	hc.DocsPath = "" // served from the binary below, so it works offline
	// No "$schema" link in every body: results have the same fields (all
	// snake_case) on REST as in MCP's structured content and run --json.
	hc.CreateHooks = nil
	// The front door has read each JSON body already (checkBody), within
	// the server's SANDBOX_READ_TIMEOUT. huma's own body deadline (5 s by
	// default) would be set on the connection after that read, where it
	// would end net/http's background read, which then cancels the
	// context of every later request on the connection.
	hc.OnAddOperation = append(hc.OnAddOperation, func(_ *huma.OpenAPI, op *huma.Operation) { op.BodyReadTimeout = -1 })
	hc.Info.Description = "Runs untrusted Python behind a kernel boundary (namespaces, cgroups, seccomp, Landlock), " +
		"in a fresh sandbox per execution or in a stateful session. Errors are RFC 9457 problem documents whose type is " +
		ProblemTypePrefix + "<kind>."
	if s.keys.Len() > 0 {
		hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
			"bearer": {Type: "http", Scheme: "bearer", Description: "An API key (SANDBOX_API_KEYS): Authorization: Bearer <key>."},
		}
		hc.Security = []map[string][]string{{"bearer": {}}}
	}
	s.api = humago.New(s.mux, hc)
	s.routes()
	s.mux.Handle("GET /docs", docs.Handler("/openapi.json"))
	s.mux.Handle("GET /docs/", docs.Handler("/openapi.json"))
	if o.Metrics != nil {
		s.mux.Handle("GET /metrics", o.Metrics.Handler())
	}
	if o.MCP != nil {
		// Progress notifications stream a run's output: each write is
		// bounded, as REST's event streams are.
		s.mux.Handle("/mcp", s.mcpAuth(streamwrite.Handler(o.MCP, cfg.StreamWriteTimeout)))
	}
	if o.MCPSSE != nil {
		s.mux.Handle("/mcp/sse", s.mcpAuth(o.MCPSSE))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, newProblem(http.StatusNotFound, KindNotFound, "no such route: "+r.Method+" "+r.URL.Path+" (see /docs)"))
	})
	s.handler = s.wrap(s.mux)
	if o.Internal != nil {
		outer := s.handler
		s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/internal/") {
				o.Internal.ServeHTTP(w, r)
				return
			}
			outer.ServeHTTP(w, r)
		})
	}
	return s
}

// mcpAuth hands the key's name to the MCP SDK as the token's user, so
// tools see who calls (sessions belong to the key) and the SDK binds each
// MCP session to the key that opened it. wrap has checked the key.
func (s *Server) mcpAuth(h http.Handler) http.Handler {
	if s.keys.Len() == 0 {
		return h
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		name, ok := s.keys.Lookup(token)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: name, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	return auth.RequireBearerToken(verify, nil)(h)
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// OpenAPI is the generated OpenAPI document.
func (s *Server) OpenAPI() *huma.OpenAPI { return s.api.OpenAPI() }

// owner is who owns the sessions of the request's caller: its key, or
// everyone local when the server has no keys.
func owner(ctx context.Context) string {
	c, _ := service.CallerFrom(ctx)
	return api.Owner(c.Key, "")
}
