package upstream

import (
	"net/http"
	"net/url"
	"strings"
)

// headerTransport adds the configured headers to requests for the
// upstream's own origin. A redirect elsewhere does not get them: they are
// credentials for that server alone.
type headerTransport struct {
	base    http.RoundTripper
	origin  *url.URL
	headers http.Header
}

// RoundTrip implements http.RoundTripper.
func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) == 0 || !sameOrigin(req.URL, t.origin) {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, vs := range t.headers {
		// The SDK's own headers (Content-Type, Mcp-Session-Id, ...) win.
		if req.Header.Get(k) == "" {
			req.Header[k] = vs
		}
	}
	return t.base.RoundTrip(req)
}

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

// newHTTPClient returns a client of its own for one upstream, so closing
// the upstream closes its idle connections and nothing else.
func newHTTPClient(cfg ServerConfig) (*http.Client, *http.Transport) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	origin, _ := url.Parse(cfg.URL) // validated
	h := http.Header{}
	for k, v := range cfg.Headers {
		h.Set(k, v)
	}
	return &http.Client{Transport: &headerTransport{base: base, origin: origin, headers: h}}, base
}
