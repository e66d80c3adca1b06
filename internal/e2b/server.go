package e2b

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/frontdoor"
	"github.com/codecage/codecage/internal/metrics"
	"github.com/codecage/codecage/internal/service"
)

// The ports the SDK names in E2b-Sandbox-Port.
const (
	portEnvd        = "49983"
	portInterpreter = "49999"
)

// EnvdVersion is the version of E2B's in-sandbox daemon whose protocol
// this surface speaks; the SDK turns features on by it (0.5.7: requests
// without a user, CloseStdin, raw uploads; 0.6.2: file metadata, sent as
// X-Metadata-* headers of an upload and read back in every EntryInfo;
// 0.6.3: a watch's events carry their entry (includeEntry); 0.6.4: a
// watch may cross network mounts (allowNetworkMounts), of which a
// codecage sandbox has none).
const EnvdVersion = "0.6.4"

// Options configure a Server.
type Options struct {
	// Keys are the API keys (X-API-KEY); none means any key is accepted
	// and every sandbox belongs to the same anonymous owner.
	Keys *access.Keys
	// Secret signs the sandboxes' access tokens; replicas that serve one
	// another's sandboxes share it. Empty: a random one (tokens then hold
	// for this process only, as its sessions do).
	Secret []byte
	// Metrics, when set, counts the requests.
	Metrics *metrics.Metrics
	// Log receives one line per request.
	Log *slog.Logger
	// Domain is the domain of sandbox hosts: a request whose Host is
	// <port>-<sandbox id>.<Domain> goes to that port of the sandbox
	// (getHost). Empty: no sandbox hosts.
	Domain string
	// Config is the operator's configuration the service runs with: the
	// limits this surface applies and reports.
	Config config.Config
}

// Server answers the E2B SDKs.
type Server struct {
	svc     *service.Service
	cfg     config.Config
	keys    *access.Keys
	tokens  tokens
	metrics *metrics.Metrics
	log     *slog.Logger
	control *http.ServeMux // control plane, by X-API-KEY
	envd    *http.ServeMux // port 49983
	interp  *http.ServeMux // port 49999
	domain  string         // of sandbox hosts, as create announces it
	ports   http.Handler   // the relay to sandboxes' ports
}

// New builds the E2B surface over svc.
func New(svc *service.Service, o Options) *Server {
	s := &Server{svc: svc, cfg: o.Config, keys: o.Keys, tokens: tokens{secret: o.Secret}, metrics: o.Metrics, log: o.Log,
		control: http.NewServeMux(), envd: http.NewServeMux(), interp: http.NewServeMux(), domain: o.Domain}
	s.ports = s.newPortProxy()
	if len(s.tokens.secret) == 0 {
		s.tokens.secret = make([]byte, 32)
		_, _ = rand.Read(s.tokens.secret)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.controlRoutes()
	s.envdRoutes()
	s.interpreterRoutes()
	return s
}

type ctxKey int

const (
	keyName ctxKey = iota
	keySandbox
)

// ServeHTTP routes a request: with E2b-Sandbox-Id it is for a sandbox's
// daemon (the port header says which), else for the control plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &frontdoor.Recorder{ResponseWriter: w}
	c := service.Caller{Surface: service.SurfaceE2B, RemoteAddr: r.RemoteAddr}
	id := r.Header.Get("E2b-Sandbox-Id")
	route := ""
	port, hostID, byHost := s.sandboxHost(r.Host)
	switch {
	case byHost:
		if id == "" {
			r.Header.Set("E2b-Sandbox-Id", hostID) // for the request log
		}
		route = s.servePort(rec, r, port, hostID, &c)
	case id == "" && strings.HasPrefix(r.URL.Path, templateUploadPath):
		route = s.serveTemplateUpload(rec, r)
	case id == "" && r.URL.Path == "/files" && r.URL.Query().Has("signature"):
		route = s.serveSigned(rec, r, &c)
	case id == "":
		route = s.serveControl(rec, r, &c)
	default:
		route = s.serveSandbox(rec, r, id, &c)
	}
	s.finish(rec, r, c, route, start)
}

func (s *Server) serveControl(w http.ResponseWriter, r *http.Request, c *service.Caller) string {
	key := ""
	if s.keys.Len() > 0 {
		name, ok := s.keys.Lookup(r.Header.Get("X-API-KEY"))
		if !ok {
			msg := "this server needs an API key: set E2B_API_KEY to a key of SANDBOX_API_KEYS"
			if r.Header.Get("X-API-KEY") != "" {
				msg = "the API key is not valid"
			}
			writeAPIError(w, http.StatusUnauthorized, msg)
			s.denied(r, *c, msg)
			return "unauthorized"
		}
		key, c.Key = name, name
	}
	ctx := context.WithValue(service.WithCaller(r.Context(), *c), keyName, key)
	if !s.admitBody(w, r) {
		return "body refused"
	}
	// ServeHTTP, not the handler Handler returns: it sets the path values.
	_, pattern := s.control.Handler(r)
	s.control.ServeHTTP(w, r.WithContext(ctx))
	return pattern
}

// sandboxRef is the sandbox a daemon request is for, once its token
// checked out.
type sandboxRef struct {
	id, owner string
}

func (s *Server) serveSandbox(w http.ResponseWriter, r *http.Request, id string, c *service.Caller) string {
	port := r.Header.Get("E2b-Sandbox-Port")
	mux := s.envd
	switch port {
	case portEnvd:
	case portInterpreter:
		mux = s.interp
	default:
		// Only the daemon and the interpreter listen in a codecage sandbox.
		http.Error(w, "codecage sandboxes serve ports "+portEnvd+" and "+portInterpreter+" only; port "+service.Quote(port)+" is not open", http.StatusBadGateway)
		return "sandbox port"
	}
	if s.expiredSignature(w, r, *c) {
		return "signature expired"
	}
	key, ok := s.sandboxKey(r, id, port)
	if !ok {
		msg := "the sandbox's access token is missing or not valid for sandbox " + service.Quote(id)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{"code": "unauthenticated", "message": msg})
		s.denied(r, *c, msg)
		return "sandbox unauthorized"
	}
	c.Key = key
	owner := api.Owner(key, "")
	ctx := service.WithCaller(r.Context(), *c)
	// A sandbox that is gone (killed, timed out, never was) answers 502
	// to everything, as E2B's proxy does: the SDK reads it as "not running".
	info, err := s.svc.GetSession(ctx, id, owner)
	if err == nil && info.State == "paused" {
		err = s.wake(ctx, info, owner)
	}
	if err != nil {
		switch {
		case errors.Is(err, service.ErrSessionNotFound) || errors.Is(err, service.ErrSessionLost):
			http.Error(w, "sandbox "+service.Quote(id)+" is not running (killed, timed out or never created)", http.StatusBadGateway)
			return "sandbox gone"
		case errors.Is(err, service.ErrSessionPaused):
			http.Error(w, "sandbox "+service.Quote(id)+" is paused: connect resumes it", http.StatusBadGateway)
			return "sandbox paused"
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return "sandbox error"
	}
	if port == portInterpreter && !s.admitBody(w, r) {
		return port + " body refused"
	}
	ctx = context.WithValue(ctx, keySandbox, sandboxRef{id: id, owner: owner})
	_, pattern := mux.Handler(r)
	mux.ServeHTTP(w, r.WithContext(ctx))
	return port + " " + pattern
}

// serveSigned serves a signed /files URL on its own (the SDK's
// downloadUrl and uploadUrl name no sandbox): the sandbox is the one whose
// access token made the signature. Each candidate is one of a key's own
// sandboxes checked with that key's token, so a signature reaches only
// the sandbox it was made for; the work is one hash per sandbox.
func (s *Server) serveSigned(w http.ResponseWriter, r *http.Request, c *service.Caller) string {
	if s.expiredSignature(w, r, *c) {
		return "signature expired"
	}
	q := r.URL.Query()
	op := signedOperation(r)
	ctx := service.WithCaller(r.Context(), *c)
	names := s.keys.Names()
	if s.keys.Len() == 0 {
		names = []string{""}
	}
	for _, name := range names {
		for _, info := range s.svc.ListSessions(ctx, api.Owner(name, "")) {
			if info.Template == "" {
				continue // not an E2B sandbox
			}
			if _, ok := s.tokens.signedOwner(info.ID, q.Get("path"), op, q.Get("username"), q.Get("signature"), q.Get("signature_expiration"), []string{name}); ok {
				r.Header.Set("E2b-Sandbox-Id", info.ID)
				r.Header.Set("E2b-Sandbox-Port", portEnvd)
				return s.serveSandbox(w, r, info.ID, c)
			}
		}
	}
	// envd's words for a signature that does not check out.
	msg := "invalid signature: it is not valid for any sandbox of this server"
	writeAPIError(w, http.StatusUnauthorized, msg)
	s.denied(r, *c, msg)
	return "signature unauthorized"
}

// expiredSignature answers a signed /files request whose signature has
// expired as envd does (401, "signature is already expired"); a request
// with an access token is judged by its token.
func (s *Server) expiredSignature(w http.ResponseWriter, r *http.Request, c service.Caller) bool {
	q := r.URL.Query()
	if r.URL.Path != "/files" || !q.Has("signature") || r.Header.Get("X-Access-Token") != "" || !q.Has("signature_expiration") {
		return false
	}
	msg := ""
	if exp, err := strconv.ParseInt(q.Get("signature_expiration"), 10, 64); err != nil {
		msg = "signature_expiration is not a Unix time in seconds"
	} else if time.Now().Unix() > exp {
		msg = "signature is already expired"
	} else {
		return false
	}
	writeAPIError(w, http.StatusUnauthorized, msg)
	s.denied(r, c, msg)
	return true
}

// signedOperation is what a /files signature must allow: a download
// reads, an upload writes.
func signedOperation(r *http.Request) string {
	if r.Method == http.MethodPost {
		return "write"
	}
	return "read"
}

// wake resumes a paused sandbox that traffic wakes (created with
// autoResume), as E2B's proxy does; any other paused sandbox stays paused
// (ErrSessionPaused), so its daemons look down to the SDK until a connect.
func (s *Server) wake(ctx context.Context, info *service.SessionInfo, owner string) error {
	if !info.AutoResume {
		return service.ErrSessionPaused
	}
	_, _, err := s.svc.ResumeSession(ctx, info.ID, owner)
	return err
}

// sandboxKey checks the request's envd access token (or, for /files, a
// URL signature made with it) and returns the name of the key the sandbox
// belongs to ("" on a server without keys). The traffic access token
// opens the interpreter's contexts only: the SDK sends those calls that
// header alone. It runs no code and reaches no file or process.
func (s *Server) sandboxKey(r *http.Request, id, port string) (string, bool) {
	if token := r.Header.Get("X-Access-Token"); token != "" {
		return s.tokens.owner(id, token)
	}
	if token := r.Header.Get(trafficHeader); token != "" {
		if port != portInterpreter || !contextCall(r) {
			return "", false
		}
		return s.tokens.trafficOwner(id, token)
	}
	q := r.URL.Query()
	if sig := q.Get("signature"); sig != "" && port == portEnvd && r.URL.Path == "/files" {
		op := signedOperation(r)
		owners := append([]string{""}, s.keys.Names()...)
		return s.tokens.signedOwner(id, q.Get("path"), op, q.Get("username"), sig, q.Get("signature_expiration"), owners)
	}
	return "", false
}

// contextCall is whether r is one of the interpreter's context calls
// (or its health), which the traffic token may make.
func contextCall(r *http.Request) bool {
	p := r.URL.Path
	return p == "/contexts" || strings.HasPrefix(p, "/contexts/") || (p == "/health" && r.Method == http.MethodGet)
}

// keyOf is the name of the control-plane request's API key ("" on a
// server without keys): what its sandboxes' access tokens carry.
func keyOf(ctx context.Context) string {
	k, _ := ctx.Value(keyName).(string)
	return k
}

// ownerOf is the owner of the control-plane request's sandboxes: the same
// as the key's sessions over REST and MCP (api.Owner).
func ownerOf(ctx context.Context) string { return api.Owner(keyOf(ctx), "") }

func sandboxOf(ctx context.Context) sandboxRef {
	ref, _ := ctx.Value(keySandbox).(sandboxRef)
	return ref
}

// writeAPIError answers a control-plane call with E2B's error body; the
// SDK reads "not found" from its code, not from the status.
func writeAPIError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) denied(r *http.Request, c service.Caller, msg string) {
	s.svc.Report(service.WithCaller(r.Context(), c), service.Event{Kind: service.EventDenied, Outcome: "unauthorized",
		Detail: r.Method + " " + r.URL.Path + ": " + msg})
	if s.metrics != nil {
		s.metrics.Denied("unauthorized")
	}
}

// finish logs the request and counts it.
func (s *Server) finish(rec *frontdoor.Recorder, r *http.Request, c service.Caller, route string, start time.Time) {
	status := rec.Status
	if status == 0 {
		status = http.StatusOK
	}
	if route == "" {
		route = "unmatched"
	}
	route = "e2b " + strings.TrimSpace(route)
	if s.metrics != nil {
		s.metrics.HTTPRequest(route, status)
	}
	level := slog.LevelInfo
	if strings.HasSuffix(r.URL.Path, "/health") {
		level = slog.LevelDebug
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", status),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		slog.String("surface", c.Surface), slog.String("remote", r.RemoteAddr),
	}
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		attrs = append(attrs, slog.String("sandbox", id))
	}
	if c.Key != "" {
		attrs = append(attrs, slog.String("key", c.Key))
	}
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}
