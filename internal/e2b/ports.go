package e2b

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/streamwrite"
)

// trafficHeader carries a sandbox's traffic access token on requests to
// its ports (E2B's proxy reads the same header).
const trafficHeader = "E2b-Traffic-Access-Token"

// maxPortHeaderBytes bounds the response headers a sandbox's server may
// send back.
const maxPortHeaderBytes = 64 << 10

// sandboxHost reads a sandbox port's host, "<port>-<sandbox id>.<domain>"
// (the SDK's getHost), where domain is this server's (its port, if any,
// is not compared: a proxy in front may change it).
func (s *Server) sandboxHost(host string) (port int, id string, ok bool) {
	if s.domain == "" {
		return 0, "", false
	}
	first, rest, found := strings.Cut(hostOnly(host), ".")
	if !found || !strings.EqualFold(rest, hostOnly(s.domain)) {
		return 0, "", false
	}
	p, id, found := strings.Cut(first, "-")
	n, err := strconv.Atoi(p)
	if !found || err != nil || n < 1 || n > 65535 || id == "" || len(id) > 128 {
		return 0, "", false
	}
	return n, id, true
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// portRef is the sandbox port a proxied request goes to, for the
// transport's dial.
type portRef struct {
	id, owner string
	port      int
}

type portKey struct{}

// servePort relays a request for a sandbox's port to the server its code
// listens with there, over a connection the service opens inside the
// sandbox (service.OpenPort): the sandbox gets no network for it. The
// sandbox's traffic token is required, unless it was created with
// allowPublicTraffic. The daemon's ports are the daemon's.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, port int, id string, c *service.Caller) string {
	if p := strconv.Itoa(port); p == portEnvd || p == portInterpreter {
		r.Header.Set("E2b-Sandbox-Id", id)
		r.Header.Set("E2b-Sandbox-Port", p)
		return s.serveSandbox(w, r, id, c)
	}
	if port == service.GatewayPort {
		// The MCP gateway runs outside the sandbox (mcpgateway.go): it
		// answers whether the sandbox runs or is paused.
		if h := s.svc.GatewayEndpoint(id); h != nil {
			if r.Body != nil {
				r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxFileSize)
			}
			h.ServeHTTP(w, r)
			return "mcp gateway"
		}
	}
	info, key, status, msg := s.portSandbox(r, id, c)
	if status != 0 {
		writePortError(w, status, msg, id, port)
		if status == http.StatusForbidden {
			s.denied(r, *c, msg)
		}
		return "port refused"
	}
	c.Key = key
	owner := api.Owner(key, "")
	ctx := service.WithCaller(r.Context(), *c)
	if info.State == "paused" {
		if err := s.wake(ctx, info, owner); err != nil {
			writePortError(w, http.StatusBadGateway, "The sandbox is paused", id, port)
			return "port paused"
		}
	}
	if max := s.cfg.MaxFileSize; r.ContentLength > max {
		writePortError(w, http.StatusRequestEntityTooLarge, "the request body is over SANDBOX_MAX_FILE_SIZE", id, port)
		return "port body refused"
	} else if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, max)
	}
	if r.Header.Get("Upgrade") != "" {
		// A websocket lives as long as its two ends want: the door's
		// timeouts are for requests.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
	}
	ctx = context.WithValue(ctx, portKey{}, portRef{id: id, owner: owner, port: port})
	s.ports.ServeHTTP(w, r.WithContext(ctx))
	return "port"
}

// portSandbox finds the sandbox a port request is for and checks its
// traffic token; a failure is a status and E2B's message for it.
func (s *Server) portSandbox(r *http.Request, id string, c *service.Caller) (info *service.SessionInfo, key string, status int, msg string) {
	ctx := service.WithCaller(r.Context(), *c)
	lookup := func(key string) (*service.SessionInfo, error) {
		info, err := s.svc.GetSession(ctx, id, api.Owner(key, ""))
		if err == nil && info.Template == "" {
			err = service.ErrSessionNotFound // a session of the other surfaces
		}
		return info, err
	}
	if token := r.Header.Get(trafficHeader); token != "" {
		key, ok := s.tokens.trafficOwner(id, token)
		if !ok {
			return nil, "", http.StatusForbidden, "the traffic access token is not valid for sandbox " + service.Quote(id)
		}
		info, err := lookup(key)
		if err != nil {
			return nil, "", http.StatusBadGateway, "The sandbox was not found"
		}
		return info, key, 0, ""
	}
	// No token: only a sandbox created with allowPublicTraffic. Each
	// key's sandbox of that id is looked up (one map lookup per key).
	names := s.keys.Names()
	if s.keys.Len() == 0 {
		names = []string{""}
	}
	for _, name := range names {
		if info, err := lookup(name); err == nil && info.PublicTraffic {
			return info, name, 0, ""
		}
	}
	return nil, "", http.StatusForbidden, "this sandbox's ports need its traffic access token in the e2b-traffic-access-token header " +
		"(or a sandbox created with network.allowPublicTraffic: true)"
}

// writePortError answers as E2B's proxy does: JSON with the sandbox and
// the port.
func writePortError(w http.ResponseWriter, status int, msg, id string, port int) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg, "sandboxId": id, "port": port})
}

// newPortProxy is the relay of every port request: one connection per
// request (no idle connection keeps a sandbox's namespace after it ends),
// response headers bounded, the body streamed as it comes (server-sent
// events, long downloads), upgrades (websockets) passed through.
func (s *Server) newPortProxy() http.Handler {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			ref, ok := ctx.Value(portKey{}).(portRef)
			if !ok {
				return nil, errors.New("e2b: a port request without its sandbox")
			}
			return s.svc.OpenPort(ctx, service.PortRequest{SessionID: ref.id, Owner: ref.owner, Port: ref.port})
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxPortHeaderBytes,
		ResponseHeaderTimeout:  0, // a server may think as long as its sandbox lives
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = pr.In.Host
			pr.Out.Host = pr.In.Host
			// The credentials of the caller are not the sandbox's to see.
			for _, h := range []string{trafficHeader, "X-Access-Token", "X-Api-Key", "Authorization"} {
				pr.Out.Header.Del(h)
			}
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			ref, _ := r.Context().Value(portKey{}).(portRef)
			switch {
			case errors.Is(err, service.ErrPortClosed):
				writePortError(w, http.StatusBadGateway, "The sandbox is running but port is not open", ref.id, ref.port)
			case errors.Is(err, service.ErrSessionNotFound), errors.Is(err, service.ErrSessionLost), errors.Is(err, service.ErrSessionEnded):
				writePortError(w, http.StatusBadGateway, "The sandbox was not found", ref.id, ref.port)
			case errors.Is(err, service.ErrUnavailable):
				writePortError(w, http.StatusBadGateway, err.Error(), ref.id, ref.port)
			case r.Context().Err() != nil:
				w.WriteHeader(api.Canceled)
			default:
				writePortError(w, http.StatusBadGateway, "the sandbox's server on this port did not answer: "+service.Quote(err.Error()), ref.id, ref.port)
			}
		},
	}
	return streamwrite.Handler(rp, s.cfg.StreamWriteTimeout)
}
