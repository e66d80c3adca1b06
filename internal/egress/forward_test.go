package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- end to end -------------------------------------------------------------

func TestForwardHTTP(t *testing.T) {
	be := newBackend(t)
	other := newBackend(t)
	fx := start(t, config{allow: "127.0.0.1:" + be.port})
	c := fx.client(t)

	resp, body := get(t, c, "http://127.0.0.1:"+be.port+"/hello")
	if resp.StatusCode != 200 || body != "hello from backend" {
		t.Fatalf("GET via proxy = %d %q", resp.StatusCode, body)
	}
	d := fx.lastDecision(t)
	if !d.Allowed || d.Method != "GET" || d.Host != "127.0.0.1" || d.Addr != "127.0.0.1:"+be.port {
		t.Errorf("decision = %+v", d)
	}

	// The entry carries a port: the same host on another port is refused.
	resp, body = get(t, c, "http://127.0.0.1:"+other.port+"/hello")
	if resp.StatusCode != 403 || !strings.Contains(body, "port "+other.port+` of host "127.0.0.1" is not on SANDBOX_NETWORK_ALLOW`) {
		t.Errorf("other port = %d %q", resp.StatusCode, body)
	}
	if other.hits.Load() != 0 {
		t.Error("refused request reached the backend")
	}
}

func TestForwardOverUnixSocket(t *testing.T) {
	be := newBackend(t)
	tlsBe := httptest.NewTLSServer(be.mux)
	t.Cleanup(tlsBe.Close)
	tlsPort := portOf(t, tlsBe.Listener.Addr())

	dir, err := os.MkdirTemp("", "egress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "proxy.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fx := start(t, config{allow: "127.0.0.1:" + be.port + ", 127.0.0.1:" + tlsPort, listener: l})

	// The URL is only a placeholder: every dial goes to the socket, as it
	// does through the relay inside the sandbox.
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid:3128"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		TLSClientConfig: tlsBe.Client().Transport.(*http.Transport).TLSClientConfig.Clone(),
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	resp, body := get(t, c, "http://127.0.0.1:"+be.port+"/hello")
	if resp.StatusCode != 200 || body != "hello from backend" {
		t.Errorf("plain GET over unix socket = %d %q", resp.StatusCode, body)
	}
	resp, body = get(t, c, "https://127.0.0.1:"+tlsPort+"/hello")
	if resp.StatusCode != 200 || body != "hello from backend" {
		t.Errorf("https GET over unix socket = %d %q", resp.StatusCode, body)
	}
	if n := len(fx.decisions()); n != 2 {
		t.Errorf("want 2 decisions, got %d", n)
	}
}

func TestConnectTLS(t *testing.T) {
	be := newBackend(t)
	tlsBe := httptest.NewTLSServer(be.mux)
	t.Cleanup(tlsBe.Close)
	tlsPort := portOf(t, tlsBe.Listener.Addr())
	fx := start(t, config{allow: "127.0.0.1:" + tlsPort})

	tr := &http.Transport{
		Proxy:           http.ProxyURL(fx.url),
		TLSClientConfig: tlsBe.Client().Transport.(*http.Transport).TLSClientConfig.Clone(),
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := range 3 { // several requests over one tunnel
		resp, body := get(t, c, "https://127.0.0.1:"+tlsPort+"/hello")
		if resp.StatusCode != 200 || body != "hello from backend" || resp.TLS == nil {
			t.Fatalf("request %d: https GET via CONNECT = %d %q", i, resp.StatusCode, body)
		}
	}
	ds := fx.decisions()
	if len(ds) != 1 || ds[0].Method != "CONNECT" || !ds[0].Allowed || ds[0].Addr != "127.0.0.1:"+tlsPort {
		t.Errorf("decisions = %+v, want one allowed CONNECT", ds)
	}
}

func TestRefusesUnlisted(t *testing.T) {
	be := newBackend(t)
	fx := start(t, config{allow: "*.pypi.org, pypi.org:443"})

	resp, body := raw(t, fx.addr, "CONNECT evil.com:443 HTTP/1.1\r\nHost: evil.com:443\r\n\r\n")
	if resp.StatusCode != 403 || body != "codecage egress: host \"evil.com\" is not on SANDBOX_NETWORK_ALLOW\n" {
		t.Errorf("CONNECT evil.com = %d %q", resp.StatusCode, body)
	}
	if !resp.Close {
		t.Error("a refused CONNECT must close the connection")
	}

	resp, body = get(t, fx.client(t), "http://evil.com/x")
	if resp.StatusCode != 403 || !strings.Contains(body, `host "evil.com" is not on SANDBOX_NETWORK_ALLOW`) {
		t.Errorf("GET evil.com = %d %q", resp.StatusCode, body)
	}
	// A literal loopback address is not listed, whatever the wildcards.
	resp, body = raw(t, fx.addr, "GET http://127.0.0.1:"+be.port+"/hello HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 403 || be.hits.Load() != 0 {
		t.Errorf("GET 127.0.0.1 = %d %q, backend hits %d", resp.StatusCode, body, be.hits.Load())
	}
	// The apex is not covered by the wildcard, and port-narrowed entries
	// say which port is wrong.
	resp, body = raw(t, fx.addr, "CONNECT pypi.org:80 HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 403 || !strings.Contains(body, `port 80 of host "pypi.org"`) {
		t.Errorf("CONNECT pypi.org:80 = %d %q", resp.StatusCode, body)
	}
	// Refused names are never looked up: the policy check comes before
	// DNS, so a refused request cannot leak data through queries either.
	if n := fx.res.callCount(); n != 0 {
		t.Errorf("resolver called %d times for refused hosts", n)
	}
}

func TestWildcardNeverReachesNonPublic(t *testing.T) {
	be := newBackend(t)
	hosts := map[string][]string{
		"ten.test":    {"10.0.0.1"},
		"meta.test":   {"169.254.169.254"},
		"loop.test":   {"127.0.0.1"},
		"mapped.test": {"::ffff:127.0.0.1"},
		"nat64.test":  {"64:ff9b::10.0.0.1"},
		"ula.test":    {"fd00:ec2::254"},
		"cgnat.test":  {"100.64.1.1"},
		"zero.test":   {"0.0.0.0"},
		"multi.test":  {"10.0.0.1", "::1", "192.168.0.1"},
	}
	want := map[string]string{
		"ten.test": "10.0.0.1 (private)", "meta.test": "169.254.169.254 (link-local)",
		"loop.test": "127.0.0.1 (loopback)", "mapped.test": "127.0.0.1 (loopback)",
		"nat64.test": "64:ff9b::a00:1 (private)", "ula.test": "fd00:ec2::254 (private)",
		"cgnat.test": "100.64.1.1 (cgnat)", "zero.test": "0.0.0.0 (unspecified)",
		"multi.test": "10.0.0.1 (private)",
	}
	var dials []string
	var mu sync.Mutex
	fx := start(t, config{allow: "*.test", hosts: hosts, before: func(p *Proxy) {
		p.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dials = append(dials, addr)
			mu.Unlock()
			return nil, errors.New("test: no dialing expected")
		}
	}})
	for name, reason := range want {
		resp, body := raw(t, fx.addr, "CONNECT "+name+":443 HTTP/1.1\r\n\r\n")
		if resp.StatusCode != 403 || !strings.Contains(body, fmt.Sprintf("host %q resolves to %s", name, reason)) {
			t.Errorf("CONNECT %s = %d %q", name, resp.StatusCode, body)
		}
	}
	resp, body := get(t, fx.client(t), "http://loop.test:"+be.port+"/hello")
	if resp.StatusCode != 403 || !strings.Contains(body, "only an exact (non-wildcard) entry") {
		t.Errorf("GET loop.test = %d %q", resp.StatusCode, body)
	}
	if be.hits.Load() != 0 || len(dials) != 0 {
		t.Errorf("refused requests dialed %v, backend hits %d", dials, be.hits.Load())
	}
	for _, d := range fx.decisions() {
		if d.Allowed || d.Addr != "" {
			t.Errorf("decision %+v, want refused without address", d)
		}
	}
}

func TestExactNameReachesLoopback(t *testing.T) {
	be := newBackend(t)
	fx := start(t, config{
		allow: "local.test, zero.test",
		hosts: map[string][]string{"local.test": {"127.0.0.1"}, "zero.test": {"0.0.0.0"}},
	})
	c := fx.client(t)
	for _, u := range []string{
		"http://local.test:" + be.port + "/hello",
		"http://LOCAL.Test.:" + be.port + "/hello", // case and trailing dot
	} {
		resp, body := get(t, c, u)
		if resp.StatusCode != 200 || body != "hello from backend" {
			t.Errorf("GET %s = %d %q", u, resp.StatusCode, body)
		}
		d := fx.lastDecision(t)
		if !d.Allowed || d.Host != "local.test" || d.Addr != "127.0.0.1:"+be.port ||
			!strings.Contains(d.Reason, `allowed by "local.test" (exact entry; loopback address)`) {
			t.Errorf("decision = %+v", d)
		}
	}
	// Even an exact entry cannot reach what is no unicast destination.
	resp, body := get(t, c, "http://zero.test:"+be.port+"/hello")
	if resp.StatusCode != 403 || !strings.Contains(body, "never reachable") {
		t.Errorf("GET zero.test = %d %q", resp.StatusCode, body)
	}
}

func TestDialsOnlyCheckedAddress(t *testing.T) {
	be := newBackend(t)
	var mu sync.Mutex
	var dials []string
	fx := start(t, config{
		allow: "*.test",
		hosts: map[string][]string{
			"mixed.test":   {"10.0.0.1", "169.254.169.254", "fd00::1", "8.8.8.8", "1.1.1.1"},
			"private.test": {"10.0.0.1", "fd00::1", "127.0.0.1"},
			"v6.test":      {"fd00::1", "::ffff:10.0.0.1", "2606:4700:4700::1111"},
		},
		before: func(p *Proxy) {
			// There is no route to 8.8.8.8 here: record what the proxy
			// dials and connect to the local backend instead.
			p.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				mu.Lock()
				dials = append(dials, network+" "+addr)
				mu.Unlock()
				return (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:"+be.port)
			}
		},
	})
	c := fx.client(t)
	resp, body := get(t, c, "http://mixed.test/hello")
	if resp.StatusCode != 200 || body != "hello from backend" {
		t.Fatalf("GET mixed.test = %d %q", resp.StatusCode, body)
	}
	if d := fx.lastDecision(t); !d.Allowed || d.Addr != "8.8.8.8:80" {
		t.Errorf("decision = %+v, want Addr 8.8.8.8:80", d)
	}
	conn, _ := connect(t, fx.addr, "mixed.test:443")
	conn.Close()
	if d := fx.lastDecision(t); !d.Allowed || d.Addr != "8.8.8.8:443" {
		t.Errorf("decision = %+v, want Addr 8.8.8.8:443", d)
	}
	resp, _ = get(t, c, "http://v6.test:8080/hello")
	if d := fx.lastDecision(t); resp.StatusCode != 200 || d.Addr != "[2606:4700:4700::1111]:8080" {
		t.Errorf("GET v6.test = %d, decision %+v", resp.StatusCode, d)
	}
	resp, _ = get(t, c, "http://private.test/hello")
	if resp.StatusCode != 403 {
		t.Errorf("GET private.test = %d, want 403", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(dials, []string{"tcp 8.8.8.8:80", "tcp 8.8.8.8:443", "tcp [2606:4700:4700::1111]:8080"}) {
		t.Errorf("dialed %q, want only the first public address", dials)
	}
	// One lookup per request: the name is never resolved again between
	// the check and the dial (DNS rebinding).
	if n := fx.res.calls("mixed.test"); n != 2 {
		t.Errorf("mixed.test resolved %d times for 2 requests", n)
	}
}

func TestUpstreamFailures(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := portOf(t, l.Addr())
	l.Close()
	fx := start(t, config{allow: "127.0.0.1, *.test"})

	resp, body := raw(t, fx.addr, "CONNECT 127.0.0.1:"+closedPort+" HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 502 || !strings.Contains(body, "cannot reach 127.0.0.1:"+closedPort) {
		t.Errorf("CONNECT to closed port = %d %q", resp.StatusCode, body)
	}
	resp, body = raw(t, fx.addr, "GET http://127.0.0.1:"+closedPort+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 502 {
		t.Errorf("GET to closed port = %d %q", resp.StatusCode, body)
	}
	resp, body = raw(t, fx.addr, "CONNECT nx.test:443 HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 502 || !strings.Contains(body, `cannot resolve "nx.test"`) {
		t.Errorf("CONNECT nx.test = %d %q", resp.StatusCode, body)
	}
}

func TestBadRequests(t *testing.T) {
	be := newBackend(t)
	fx := start(t, config{allow: "127.0.0.1"})
	cases := []struct {
		req    string
		status int
		body   string
	}{
		{"GET /hello HTTP/1.1\r\nHost: 127.0.0.1:" + be.port + "\r\n\r\n", 400, "this is a forward proxy"},
		{"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, "this is a forward proxy"},
		{"GET https://127.0.0.1:" + be.port + "/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "use CONNECT for https"},
		{"GET ftp://127.0.0.1/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, `scheme "ftp"`},
		{"CONNECT /path HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n", 400, "is not host:port"},
		{"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n", 400, "is not host:port"},
		{"CONNECT ::1:443 HTTP/1.1\r\n\r\n", 400, ""}, // net/http refuses it first
		{"CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n", 400, `port "0"`},
		{"CONNECT 127.0.0.1:70000 HTTP/1.1\r\n\r\n", 400, `port "70000"`},
		{"CONNECT bücher.de:443 HTTP/1.1\r\n\r\n", 400, `host "bücher.de" is not ASCII; use its punycode (xn--) form`},
		{"GET http://bücher.de/ HTTP/1.1\r\nHost: xn--bcher-kva.de\r\n\r\n", 400, "not ASCII"},
		{"CONNECT a..b:443 HTTP/1.1\r\n\r\n", 400, "empty label"},
		{"CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", 400, ""},
	}
	for _, c := range cases {
		resp, body := raw(t, fx.addr, c.req)
		if resp.StatusCode != c.status || !strings.Contains(body, c.body) {
			t.Errorf("%q = %d %q, want %d containing %q", c.req, resp.StatusCode, body, c.status, c.body)
		}
	}
	if be.hits.Load() != 0 {
		t.Errorf("bad requests reached the backend %d times", be.hits.Load())
	}
}
