package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const canary = "sk-canary-7f3a9c1e"

// secrets is the tests' store: "openai" is the canary.
func secrets(_ context.Context, name string) (string, error) {
	switch name {
	case "openai":
		return canary, nil
	case "broken":
		return "a\r\nX-Injected: 1", nil
	}
	return "", errors.New("no such secret")
}

// apiServer is an HTTPS server for example.com (httptest's certificate)
// that records the Authorization each request brought and echoes it back
// in a header and the body, as a careless API might.
type apiServer struct {
	srv  *httptest.Server
	port int
	mu   sync.Mutex
	seen []string // "METHOD path Authorization"
}

func newAPIServer(t testing.TB) *apiServer {
	a := &apiServer{}
	// A bare handler: a ServeMux would answer unclean paths itself.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		a.mu.Lock()
		a.seen = append(a.seen, r.Method+" "+r.URL.EscapedPath()+" "+auth)
		a.mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
			return
		}
		w.Header().Set("X-Echo", auth)
		w.Header().Set("Content-Length", strconv.Itoa(len("you sent: "+auth)))
		io.WriteString(w, "you sent: "+auth)
	})
	a.srv = httptest.NewTLSServer(handler)
	t.Cleanup(a.srv.Close)
	a.port, _ = strconv.Atoi(portOf(t, a.srv.Listener.Addr()))
	return a
}

func (a *apiServer) last(t *testing.T) string {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		t.Fatal("the server got no request")
	}
	return a.seen[len(a.seen)-1]
}

func (a *apiServer) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.srv.Certificate())
	return p
}

// credentialFixture is a proxy with an authority whose upstream roots
// trust the API server, and a client that trusts the authority alone.
func credentialFixture(t *testing.T, api *apiServer, creds []Binding, roots *x509.CertPool) (*fixture, *http.Client) {
	t.Helper()
	auth, err := NewAuthority("test")
	if err != nil {
		t.Fatal(err)
	}
	fx := start(t, config{
		allow: "example.com,127.0.0.1",
		hosts: map[string][]string{"example.com": {"127.0.0.1"}},
		opts: func(o *Options) {
			o.Authority, o.UpstreamRoots = auth, roots
		},
		before: func(p *Proxy) {
			if err := p.SetBindings(creds, secrets); err != nil {
				t.Fatal(err)
			}
		},
	})
	trust := x509.NewCertPool()
	if !trust.AppendCertsFromPEM(auth.CertificatePEM()) {
		t.Fatal("the authority's PEM does not parse")
	}
	tr := &http.Transport{Proxy: http.ProxyURL(fx.url), TLSClientConfig: &tls.Config{RootCAs: trust}}
	t.Cleanup(tr.CloseIdleConnections)
	return fx, &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestCredentialIsAddedAndNeverComesBack(t *testing.T) {
	api := newAPIServer(t)
	fx, c := credentialFixture(t, api, []Binding{{
		Secret: "openai", Host: "example.com", Port: api.port, PathPrefix: "/v1/", Methods: []string{"GET"},
		Header: "Authorization", Prefix: "Bearer ",
	}}, api.roots())
	base := "https://example.com:" + strconv.Itoa(api.port)

	for i := range 2 { // one tunnel, several requests
		resp, body := get(t, c, base+"/v1/models")
		if resp.StatusCode != 200 || api.last(t) != "GET /v1/models Bearer "+canary {
			t.Fatalf("request %d: %d %q; the server saw %q", i, resp.StatusCode, body, api.last(t))
		}
		if strings.Contains(body, canary) || body != "you sent: Bearer "+strings.Repeat("*", len(canary)) {
			t.Errorf("the body the sandbox read is %q: the secret must be masked", body)
		}
		for k, vv := range resp.Header {
			if strings.Contains(strings.Join(vv, " "), canary) {
				t.Errorf("response header %s carries the secret back", k)
			}
		}
	}
	if !strings.Contains(fx.logs.String(), `credential=openai`) || strings.Contains(fx.logs.String(), canary) {
		t.Errorf("the log must name the credential and never hold its value:\n%s", fx.logs.String())
	}

	// Outside the binding's path and method: sent on, without it.
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v2/models"}, {"POST", "/v1/models"}, {"GET", "/v1/../admin"}, {"GET", "/v1%2f..%2fadmin"},
	} {
		req, _ := http.NewRequest(tc.method, base+"/", nil)
		req.URL.Opaque = "//example.com:" + strconv.Itoa(api.port) + tc.path // the path as written, not cleaned
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		resp.Body.Close()
		if got := api.last(t); resp.StatusCode != 200 || got != tc.method+" "+tc.path+" " {
			t.Errorf("%s %s: %d, the server saw %q: want it sent on without the credential", tc.method, tc.path, resp.StatusCode, got)
			t.Errorf("%s %s: the server got the credential (%q)", tc.method, tc.path, got)
		}
	}

	// An upgrade (WebSocket) is refused in words, not half carried.
	up, _ := http.NewRequest("GET", base+"/v1/socket", nil)
	up.Header.Set("Connection", "Upgrade")
	up.Header.Set("Upgrade", "websocket")
	if resp, err := c.Do(up); err != nil || resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("an upgrade in an opened tunnel: %v %v, want 501", resp, err)
	} else {
		resp.Body.Close()
	}

	// A redirect to another host is a tunnel to it, never opened: the
	// credential does not follow. 127.0.0.1 is the same server by address.
	other := "https://127.0.0.1:" + strconv.Itoa(api.port) + "/v1/other"
	tr := c.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.RootCAs = api.roots()
	rc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	resp, _ := get(t, rc, other)
	if got := api.last(t); resp.StatusCode != 200 || got != "GET /v1/other " {
		t.Errorf("a host without credentials: %d, the server saw %q", resp.StatusCode, got)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName == "codecage egress test" {
		t.Error("a host without credentials must be tunnelled, not opened")
	}

	// Plain HTTP to the same name never carries a credential.
	plain := newBackend(t)
	var plainAuth string
	plain.mux.HandleFunc("/v1/plain", func(w http.ResponseWriter, r *http.Request) { plainAuth = r.Header.Get("Authorization") })
	resp, _ = get(t, c, "http://example.com:"+plain.port+"/v1/plain")
	if resp.StatusCode != 200 || plainAuth != "" {
		t.Errorf("plain HTTP: %d, Authorization %q", resp.StatusCode, plainAuth)
	}
}

func TestCredentialPlaceholderAndRedirect(t *testing.T) {
	api := newAPIServer(t)
	const placeholder = "CODECAGE-PLACEHOLDER-openai"
	_, c := credentialFixture(t, api, []Binding{{
		Name: "openai", Secret: "openai", Host: "example.com", Port: api.port, Placeholder: placeholder,
	}}, api.roots())
	base := "https://example.com:" + strconv.Itoa(api.port)
	req, _ := http.NewRequest("GET", base+"/chat", nil)
	req.Header.Set("Authorization", "Bearer "+placeholder)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := api.last(t); got != "GET /chat Bearer "+canary {
		t.Fatalf("the server saw %q, want the placeholder replaced", got)
	}
	if resp.Header.Get("X-Echo") != "" {
		t.Error("the echoed header must be dropped")
	}

	// The server redirects to plain HTTP (a downgrade): the client
	// follows with its placeholder, which stays a placeholder.
	plain := newBackend(t)
	var plainAuth string
	plain.mux.HandleFunc("/landing", func(w http.ResponseWriter, r *http.Request) { plainAuth = r.Header.Get("Authorization") })
	req, _ = http.NewRequest("GET", base+"/redirect?to=http://example.com:"+plain.port+"/landing", nil)
	req.Header.Set("Authorization", "Bearer "+placeholder)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || plainAuth != "Bearer "+placeholder {
		t.Errorf("after a redirect to plain HTTP: %d, the server saw %q", resp.StatusCode, plainAuth)
	}
}

func TestCredentialUpstreamIsVerified(t *testing.T) {
	api := newAPIServer(t)
	_, c := credentialFixture(t, api, []Binding{{
		Name: "k", Secret: "openai", Host: "example.com", Port: api.port, Header: "X-Api-Key",
	}}, x509.NewCertPool()) // trusts nothing
	resp, body := get(t, c, "https://example.com:"+strconv.Itoa(api.port)+"/x")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Errorf("an upstream the proxy cannot verify: %d %q, want 502 naming the certificate", resp.StatusCode, body)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.seen) != 0 {
		t.Errorf("the server got %q", api.seen)
	}
}

func TestCredentialChecks(t *testing.T) {
	ok := Binding{Secret: "s", Host: "api.example.com", Header: "Authorization", Prefix: "Bearer "}
	for name, c := range map[string]Binding{
		"host header":   {Secret: "s", Host: "api.example.com", Header: "Host"},
		"proxy header":  {Secret: "s", Host: "api.example.com", Header: "Proxy-Authorization"},
		"address":       {Secret: "s", Host: "10.0.0.1", Header: "Authorization"},
		"both":          {Secret: "s", Host: "api.example.com", Header: "A", Placeholder: "placeholder"},
		"neither":       {Secret: "s", Host: "api.example.com"},
		"short holder":  {Secret: "s", Host: "api.example.com", Placeholder: "x"},
		"no secret":     {Host: "api.example.com", Header: "A"},
		"bare star":     {Secret: "s", Host: "*", Header: "A"},
		"relative":      {Secret: "s", Host: "api.example.com", Header: "A", PathPrefix: "v1"},
		"prefix alone":  {Secret: "s", Host: "api.example.com", Placeholder: "placeholder", Prefix: "Bearer "},
		"prefix breaks": {Secret: "s", Host: "api.example.com", Header: "A", Prefix: "x\r\nY: z"},
		"connect":       {Secret: "s", Host: "api.example.com", Header: "A", Methods: []string{"CONNECT"}},
	} {
		if err := c.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := ok.Check(); err != nil {
		t.Error(err)
	}
	many := make([]Binding, MaxBindings+1)
	for i := range many {
		many[i] = ok
	}
	if err := CheckBindings(many); err == nil {
		t.Error("more than MaxBindings accepted")
	}
}

// A secret that is gone, or that would break the header, refuses the
// tunnel with the binding's name rather than send the request bare.
func TestCredentialSecretUnavailable(t *testing.T) {
	for name, secret := range map[string]string{"gone": "deleted", "crlf": "broken"} {
		t.Run(name, func(t *testing.T) {
			api := newAPIServer(t)
			fx, c := credentialFixture(t, api, []Binding{
				{Name: name, Secret: secret, Host: "example.com", Port: api.port, Header: "X-Api-Key"},
			}, api.roots())
			_, err := c.Get("https://example.com:" + strconv.Itoa(api.port) + "/x")
			if err == nil || !strings.Contains(err.Error(), "Bad Gateway") {
				t.Errorf("got %v, want the tunnel refused", err)
			}
			if !strings.Contains(fx.logs.String(), `egress credential \"`+name+`\"`) {
				t.Errorf("the log must name the binding:\n%s", fx.logs.String())
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			if len(api.seen) != 0 {
				t.Errorf("the server got %q", api.seen)
			}
		})
	}
}

func TestCredentialHostPrecedence(t *testing.T) {
	set, err := compileCredentials([]Binding{
		{Name: "wide", Secret: "1", Host: "*.example.com", Header: "A"},
		{Name: "narrow", Secret: "2", Host: "*.api.example.com", Header: "A"},
		{Name: "exact", Secret: "3", Host: "v1.api.example.com", Header: "A"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{
		"v1.api.example.com": "exact", "v2.api.example.com": "narrow", "www.example.com": "wide", "example.com": "",
		"v1.api.example.com.evil.net": "",
	} {
		got := set.forHost(target{name: host, port: 443})
		name := ""
		if len(got) == 1 {
			name = got[0].Name
		} else if len(got) > 1 {
			t.Errorf("%s: %d credentials, want one rule set", host, len(got))
		}
		if name != want {
			t.Errorf("%s: %q, want %q", host, name, want)
		}
	}
	one, err := compileCredentials([]Binding{{Secret: "s", Host: "api.example.com", Port: 443, Header: "A"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := one.forHost(target{name: "api.example.com", port: 22}); len(got) != 0 {
		t.Error("a binding of port 443 must leave another port of the host untouched")
	}
	if got := set.forHost(target{name: "v1.api.example.com", port: 8443}); len(got) != 1 {
		t.Error("a binding without a port covers every port")
	}
}

func TestMaskerAcrossReads(t *testing.T) {
	secret := "abcdefgh"
	in := "xx" + secret + "yy" + secret[:3] + secret + "zz" + secret[:5]
	m := newMasker(io.NopCloser(&slowReader{s: in}), []string{secret})
	b, err := io.ReadAll(m)
	if err != nil {
		t.Fatal(err)
	}
	want := "xx********yyabc********zzabcde"
	if string(b) != want {
		t.Errorf("masked %q, want %q", b, want)
	}
}

// slowReader returns one byte a read, so secrets straddle reads.
type slowReader struct{ s string }

func (r *slowReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	p[0] = r.s[0]
	r.s = r.s[1:]
	return 1, nil
}

// A host with a binding of any port still carries protocols that are not
// TLS, untouched: one whose client speaks first, and one whose server
// does (ssh's banner), which the proxy must not wait on forever.
func TestCredentialHostOtherProtocols(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "SSH-2.0-test\r\n")
				buf := make([]byte, 64)
				n, _ := c.Read(buf)
				io.WriteString(c, "echo "+string(buf[:n]))
			}()
		}
	}()
	port, _ := strconv.Atoi(portOf(t, l.Addr()))
	auth, err := NewAuthority("test")
	if err != nil {
		t.Fatal(err)
	}
	fx := start(t, config{
		allow: "example.com",
		hosts: map[string][]string{"example.com": {"127.0.0.1"}},
		opts:  func(o *Options) { o.Authority = auth },
		before: func(p *Proxy) {
			if err := p.SetBindings([]Binding{{Secret: "openai", Host: "example.com", Header: "A"}}, secrets); err != nil {
				t.Fatal(err)
			}
		},
	})
	c, br := connect(t, fx.addr, "example.com:"+strconv.Itoa(port))
	defer c.Close()
	banner, err := br.ReadString('\n')
	if err != nil || banner != "SSH-2.0-test\r\n" {
		t.Fatalf("the server's banner: %q %v", banner, err)
	}
	io.WriteString(c, "hi")
	rest, _ := io.ReadAll(io.LimitReader(br, 7))
	if string(rest) != "echo hi" {
		t.Errorf("through the tunnel: %q", rest)
	}
}
