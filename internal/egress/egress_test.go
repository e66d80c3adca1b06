package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ---- policy parsing -------------------------------------------------------

func TestParsePolicyGood(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,, ", nil},
		{"api.github.com", []string{"api.github.com"}},
		{" api.github.com , *.PyPI.org ,, files.pythonhosted.org. ",
			[]string{"api.github.com", "*.pypi.org", "files.pythonhosted.org"}},
		{"Example.COM:443, *.example.com:8443, *.example.net.",
			[]string{"example.com:443", "*.example.com:8443", "*.example.net"}},
		{"127.0.0.1, 127.0.0.1:8080, 0x7f.example", []string{"127.0.0.1", "127.0.0.1:8080", "0x7f.example"}},
		{"::1, [::1], [::1]:443, 2001:DB8::1, [2001:0db8::2]:8443",
			[]string{"::1", "::1", "[::1]:443", "2001:db8::1", "[2001:db8::2]:8443"}},
		{"::ffff:10.0.0.1, [::ffff:10.0.0.2]:80", []string{"10.0.0.1", "10.0.0.2:80"}},
		{"_acme-challenge.example.com, xn--bcher-kva.de, localhost, a:65535, b:1",
			[]string{"_acme-challenge.example.com", "xn--bcher-kva.de", "localhost", "a:65535", "b:1"}},
		{"*.com", []string{"*.com"}},
	}
	for _, c := range cases {
		p, err := ParsePolicy(c.in)
		if err != nil {
			t.Errorf("ParsePolicy(%q): %v", c.in, err)
			continue
		}
		if !slices.Equal(p.Allow, c.want) {
			t.Errorf("ParsePolicy(%q) = %q, want %q", c.in, p.Allow, c.want)
		}
		// The canonical form parses to itself.
		again, err := ParsePolicy(strings.Join(p.Allow, ","))
		if err != nil || !slices.Equal(again.Allow, p.Allow) {
			t.Errorf("reparsing %q = %q, %v", p.Allow, again.Allow, err)
		}
	}
}

func TestParsePolicyBad(t *testing.T) {
	cases := []struct{ in, want string }{
		{"*foo", "'*' must be the whole leading label"},
		{"*", "'*' must be the whole leading label"},
		{"foo*.com", "'*' must be the whole leading label"},
		{"a.*.b", "'*' must be the whole leading label"},
		{"*.*.b", "'*' is allowed only once"},
		{"*.", "empty host name"},
		{"a..b", "empty label"},
		{".a.com", "empty label"},
		{"a.com..", "empty label"},
		{"host:99999", `port "99999"`},
		{"host:0", `port "0"`},
		{"host:+80", `port "+80"`},
		{"host:http", `port "http"`},
		{"host:", "empty port"},
		{"host:80:90", "not a valid IPv6 address"},
		{"[::1", "missing ']'"},
		{"[::1]x", "unexpected"},
		{"[::1]:", "empty port"},
		{"[1.2.3.4]:80", "only IPv6 addresses go in brackets"},
		{"[foo]:80", "is not an IPv6 address"},
		{"1:2:3", "not a valid IPv6 address"},
		{"fe80::1%eth0", "scoped"},
		{"bücher.de", "not ASCII"},
		{"\u212aelvin.com", "not ASCII"}, // Kelvin sign lowercases to 'k'
		{"a b.com", "invalid character"},
		{"a/b.com", "invalid character"},
		{"-a.com", "starts or ends with '-'"},
		{"a-.com", "starts or ends with '-'"},
		{"127.1", "looks like an IP address"},
		{"017.0.0.1", "looks like an IP address"},
		{"1.2.3.256", "looks like an IP address"},
		{"*.10.0.0.1", "looks like an IP address"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{strings.Repeat("abcdefghi.", 26) + "com", "longer than 253"},
	}
	for _, c := range cases {
		p, err := ParsePolicy("ok.example.com, " + c.in)
		if err == nil {
			t.Errorf("ParsePolicy(%q) = %q, want error containing %q", c.in, p.Allow, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), strconv.Quote(c.in)) {
			t.Errorf("ParsePolicy(%q) error %q, want it to quote the entry and contain %q", c.in, err, c.want)
		}
		if p.Allow != nil {
			t.Errorf("ParsePolicy(%q) returned entries %q along with an error", c.in, p.Allow)
		}
	}
	// Every bad entry is reported, not just the first.
	_, err := ParsePolicy("*foo, good.com, a..b")
	if err == nil || !strings.Contains(err.Error(), `"*foo"`) || !strings.Contains(err.Error(), `"a..b"`) {
		t.Errorf("want both bad entries reported, got %v", err)
	}
}

func TestNewIgnoresMalformedEntries(t *testing.T) {
	var logs syncBuffer
	p := New(Policy{Allow: []string{"good.example", "*bad", "a..b"}}, Options{Logger: testLogger(&logs)})
	defer p.Close()
	if len(p.entries) != 1 || p.entries[0].String() != "good.example" {
		t.Errorf("entries = %v, want only good.example", p.entries)
	}
	if n := strings.Count(logs.String(), "ignoring malformed allow entry"); n != 2 {
		t.Errorf("want 2 warnings about malformed entries, got %d:\n%s", n, logs.String())
	}
}

// ---- matching ---------------------------------------------------------------

func TestLookup(t *testing.T) {
	pol, err := ParsePolicy("api.github.com, *.pypi.org, example.com:443, 10.1.2.3, 192.0.2.1:8080, " +
		"[2001:db8::1]:443, *.svc.test:8443, *.example.org, api.example.org")
	if err != nil {
		t.Fatal(err)
	}
	entries, errs := compile(pol)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cases := []struct {
		host, port string
		want       string // matching entry, "" for none
		explicit   bool
		portDenied bool
	}{
		{"api.github.com", "443", "api.github.com", true, false},
		{"API.GitHub.COM", "80", "api.github.com", true, false},
		{"api.github.com.", "443", "api.github.com", true, false},
		{"github.com", "443", "", false, false},
		{"x.api.github.com", "443", "", false, false}, // exact entries do not cover subdomains
		{"files.pypi.org", "443", "*.pypi.org", false, false},
		{"FILES.PyPI.org.", "443", "*.pypi.org", false, false},
		{"a.b.pypi.org", "80", "*.pypi.org", false, false},
		{"pypi.org", "443", "", false, false}, // the wildcard does not match its apex
		{"evilpypi.org", "443", "", false, false},
		{"pypi.org.evil.com", "443", "", false, false},
		{"example.com", "443", "example.com:443", true, false},
		{"example.com", "80", "", false, true},
		{"www.example.com", "443", "", false, false},
		{"10.1.2.3", "22", "10.1.2.3", true, false},
		{"::ffff:10.1.2.3", "22", "10.1.2.3", true, false},
		{"10.1.2.4", "22", "", false, false},
		{"192.0.2.1", "8080", "192.0.2.1:8080", true, false},
		{"192.0.2.1", "8081", "", false, true},
		{"2001:db8::1", "443", "[2001:db8::1]:443", true, false},
		{"2001:0DB8:0:0::1", "443", "[2001:db8::1]:443", true, false},
		{"2001:db8::1", "80", "", false, true},
		{"x.svc.test", "8443", "*.svc.test:8443", false, false},
		{"x.svc.test", "443", "", false, true},
		{"www.example.org", "443", "*.example.org", false, false},
		{"api.example.org", "443", "api.example.org", true, false}, // exact wins over wildcard
	}
	for _, c := range cases {
		tg, err := parseTarget(c.host, c.port)
		if err != nil {
			t.Errorf("parseTarget(%q, %q): %v", c.host, c.port, err)
			continue
		}
		e, ok, portDenied := lookup(entries, tg)
		got := ""
		if ok {
			got = e.String()
		}
		if got != c.want || (ok && e.explicit() != c.explicit) || portDenied != c.portDenied {
			t.Errorf("lookup(%s:%s) = %q explicit=%v portDenied=%v, want %q explicit=%v portDenied=%v",
				c.host, c.port, got, ok && e.explicit(), portDenied, c.want, c.explicit, c.portDenied)
		}
	}
	// Nothing matches an empty policy.
	tg, _ := parseTarget("example.com", "443")
	if _, ok, _ := lookup(nil, tg); ok {
		t.Error("empty policy allowed example.com")
	}
}

func TestParseTargetBad(t *testing.T) {
	cases := []struct{ host, port, want string }{
		{"bücher.de", "443", "not ASCII"},
		{"a..b", "443", "empty label"},
		{"fe80::1%eth0", "443", "scoped"},
		{"127.1", "80", "looks like an IP"},
		{"", "80", "empty host"},
		{"a.com", "0", "port"},
		{"a.com", "65536", "port"},
		{"a.com", "x", "port"},
		{"a.com", "", "port"},
		{"evil.com\r\nX: y", "80", "invalid character"},
	}
	for _, c := range cases {
		if _, err := parseTarget(c.host, c.port); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTarget(%q, %q) error = %v, want %q", c.host, c.port, err, c.want)
		}
	}
}

// ---- address classification ----------------------------------------------

func TestAddrClass(t *testing.T) {
	cases := []struct{ addr, want string }{
		{"8.8.8.8", classPublic},
		{"1.1.1.1", classPublic},
		{"100.63.255.255", classPublic},
		{"100.128.0.0", classPublic},
		{"172.32.0.1", classPublic},
		{"172.15.255.255", classPublic},
		{"0.0.0.0", classUnspecified},
		{"0.1.2.3", classThisNetwork},
		{"10.0.0.1", classPrivate},
		{"10.255.255.255", classPrivate},
		{"100.64.0.1", classCGNAT},
		{"127.0.0.1", classLoopback},
		{"127.255.255.254", classLoopback},
		{"169.254.169.254", classLinkLocal},
		{"172.16.0.1", classPrivate},
		{"172.31.255.255", classPrivate},
		{"192.168.1.1", classPrivate},
		{"192.0.0.8", classReserved},
		{"192.0.2.5", classDocumentation},
		{"198.18.0.1", classBenchmarking},
		{"198.51.100.7", classDocumentation},
		{"203.0.113.9", classDocumentation},
		{"224.0.0.1", classMulticast},
		{"239.255.255.250", classMulticast},
		{"240.0.0.1", classReserved},
		{"255.255.255.255", classBroadcast},

		{"::", classUnspecified},
		{"::1", classLoopback},
		{"::ffff:127.0.0.1", classLoopback},
		{"::ffff:10.0.0.1", classPrivate},
		{"::ffff:169.254.169.254", classLinkLocal},
		{"::ffff:0.0.0.0", classUnspecified},
		{"::ffff:8.8.8.8", classPublic},
		{"::127.0.0.1", classReserved}, // IPv4-compatible, deprecated
		{"fc00::1", classPrivate},
		{"fd00:ec2::254", classPrivate},
		{"fe80::1", classLinkLocal},
		{"fe80::1%eth0", classLinkLocal},
		{"fec0::1", classPrivate},
		{"ff02::1", classMulticast},
		{"2001:db8::1", classDocumentation},
		{"2001::1", classReserved}, // Teredo
		{"100::1", classReserved},
		{"4000::1", classReserved},
		{"2606:4700:4700::1111", classPublic},
		{"2a00:1450:4001::1", classPublic},
		// NAT64 and 6to4 take the class of the IPv4 address they embed.
		{"64:ff9b::8.8.8.8", classPublic},
		{"64:ff9b::10.0.0.1", classPrivate},
		{"64:ff9b::127.0.0.1", classLoopback},
		{"64:ff9b::169.254.169.254", classLinkLocal},
		{"64:ff9b:1::1", classPrivate},
		{"2002:a00:1::", classPrivate},
		{"2002:7f00:1::1", classLoopback},
		{"2002:a9fe:a9fe::", classLinkLocal},
		{"2002:808:808::1", classPublic},
	}
	for _, c := range cases {
		a := netip.MustParseAddr(c.addr)
		if got := addrClass(a); got != c.want {
			t.Errorf("addrClass(%s) = %q, want %q", c.addr, got, c.want)
		}
	}
	if got := addrClass(netip.Addr{}); got != classInvalid {
		t.Errorf("addrClass(zero) = %q, want invalid", got)
	}
}

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

func TestHostileInput(t *testing.T) {
	be := newBackend(t)
	fx := start(t, config{allow: "127.0.0.1", before: func(p *Proxy) {
		p.srv.ReadHeaderTimeout = 300 * time.Millisecond
	}})

	// Oversized headers: 431 (net/http) rather than unbounded buffering.
	big := "GET http://127.0.0.1:" + be.port + "/hello HTTP/1.1\r\nHost: x\r\nX-Big: " +
		strings.Repeat("a", maxHeaderBytes+1024) + "\r\n\r\n"
	resp, _ := raw(t, fx.addr, big)
	if resp.StatusCode != 431 && resp.StatusCode != 400 {
		t.Errorf("oversized header = %d, want 431 or 400", resp.StatusCode)
	}
	// Just under the cap still works.
	ok := "GET http://127.0.0.1:" + be.port + "/hello HTTP/1.1\r\nHost: x\r\nX-Big: " +
		strings.Repeat("a", maxHeaderBytes-1024) + "\r\n\r\n"
	if resp, _ := raw(t, fx.addr, ok); resp.StatusCode != 200 {
		t.Errorf("header under the cap = %d, want 200", resp.StatusCode)
	}

	// Slowloris: a client that never finishes its headers is dropped.
	c, err := net.Dial("tcp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://127.0.0.1/ HTTP/1.1\r\nHost: x\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	began := time.Now()
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("slow client: %v (want the proxy to close the connection)", err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("slow client dropped after %v", d)
	}

	// Garbage: answered or dropped, never a crash; the proxy keeps serving.
	garbage := []string{
		"\r\n\r\n",
		"GARBAGE\r\n\r\n",
		"GET\r\n\r\n",
		"GET http://127.0.0.1/ HTTP/9.9\r\n\r\n",
		"GET http://[::1/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT [::1]:443:443 HTTP/1.1\r\n\r\n",
		"CONNECT :443 HTTP/1.1\r\n\r\n",
		"GET http://127.0.0.1:99999999999999999999/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://127.0.0.1/ HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
		"GET http://127.0.0.1/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"GET http://127.0.0.1/ HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 5000) + "\r\n",
		"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", // TLS to the proxy port
	}
	for i := range 20 {
		b := make([]byte, 1+i*97)
		rand.Read(b)
		garbage = append(garbage, string(b)+"\r\n\r\n")
	}
	for _, g := range garbage {
		c, err := net.Dial("tcp", fx.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, g)
		io.Copy(io.Discard, c)
		c.Close()
	}
	resp, body := get(t, fx.client(t), "http://127.0.0.1:"+be.port+"/hello")
	if resp.StatusCode != 200 || body != "hello from backend" {
		t.Errorf("after garbage: %d %q", resp.StatusCode, body)
	}
	if strings.Contains(fx.logs.String(), "panic") {
		t.Errorf("a handler panicked:\n%s", fx.logs.String())
	}
}

func TestHopByHopHeaders(t *testing.T) {
	be := newBackend(t)
	fx := start(t, config{allow: "127.0.0.1"})
	resp, body := raw(t, fx.addr, "GET http://127.0.0.1:"+be.port+"/headers HTTP/1.1\r\n"+
		"Host: evil.example\r\n"+
		"Connection: keep-alive, X-Drop-Me\r\n"+
		"X-Drop-Me: 1\r\n"+
		"Keep-Alive: timeout=5\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\n"+
		"Proxy-Connection: keep-alive\r\n"+
		"Proxy-Anything: 1\r\n"+
		"Upgrade: websocket\r\n"+
		"Te: gzip\r\n"+
		"X-Keep: yes\r\n"+
		"Accept: */*\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var got struct {
		Host   string
		Header http.Header
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	// The target is the request URI, not the client's Host header.
	if got.Host != "127.0.0.1:"+be.port {
		t.Errorf("upstream Host = %q", got.Host)
	}
	for _, h := range []string{"X-Drop-Me", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection",
		"Proxy-Anything", "Upgrade", "Te", "X-Forwarded-For", "Forwarded", "Via", "User-Agent", "Accept-Encoding"} {
		if v, ok := got.Header[h]; ok {
			t.Errorf("upstream received %s: %q", h, v)
		}
	}
	if got.Header.Get("X-Keep") != "yes" || got.Header.Get("Accept") != "*/*" {
		t.Errorf("end-to-end headers lost: %v", got.Header)
	}

	// Response side. net/http rewrites a handler's Connection header, so
	// the upstream here answers with raw bytes.
	hopPort := rawBackend(t, "HTTP/1.1 200 OK\r\n"+
		"Connection: keep-alive, X-Conn-Only\r\n"+
		"X-Conn-Only: 1\r\n"+
		"Keep-Alive: timeout=5\r\n"+
		"Proxy-Authenticate: Basic realm=x\r\n"+
		"X-Backend: ok\r\n"+
		"Content-Length: 2\r\n\r\nok")
	resp, body = raw(t, fx.addr, "GET http://127.0.0.1:"+hopPort+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.Header.Get("X-Backend") != "ok" || body != "ok" {
		t.Errorf("X-Backend lost: %v", resp.Header)
	}
	for _, h := range []string{"Proxy-Authenticate", "Keep-Alive", "X-Conn-Only"} {
		if v, ok := resp.Header[h]; ok {
			t.Errorf("client received hop-by-hop %s: %q", h, v)
		}
	}
}

func TestForwardBodiesAndStreaming(t *testing.T) {
	be := newBackend(t)
	fx := start(t, config{allow: "127.0.0.1:" + be.port})
	c := fx.client(t)

	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	resp, err := c.Post("http://127.0.0.1:"+be.port+"/echo", "application/octet-stream", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Errorf("echo of 1 MiB: %d bytes back, err %v", len(got), err)
	}

	// The first part of a response arrives before the upstream finishes.
	resp, err = c.Get("http://127.0.0.1:" + be.port + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line = %q, %v", line, err)
	}
	close(be.release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "second\n" {
		t.Errorf("rest = %q, %v", rest, err)
	}
	if resp.Trailer.Get("X-Checksum") != "abc" {
		t.Errorf("trailer lost: %v", resp.Trailer)
	}
}

func TestForwardTruncatedAndExpect(t *testing.T) {
	be := newBackend(t)
	// Chunked, so the proxy's own response is chunked too and only a
	// dropped connection can tell the client that the end is missing.
	short := rawBackend(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nonly ten b\r\n")
	fx := start(t, config{allow: "127.0.0.1"})

	// An upstream that dies mid-body must not look like a complete
	// response: the proxy drops the connection.
	resp, err := fx.client(t).Get("http://127.0.0.1:" + short + "/")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated upstream body read: %v, want unexpected EOF", err)
	}

	// Expect: 100-continue (curl does this for large uploads).
	c, err := net.Dial("tcp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "POST http://127.0.0.1:"+be.port+"/echo HTTP/1.1\r\nHost: x\r\n"+
		"Content-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("want 100 Continue, got %q %v", line, err)
	}
	br.ReadString('\n') // blank line after the 100
	io.WriteString(c, "hello")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "hello" {
		t.Errorf("100-continue POST = %d %q", resp.StatusCode, body)
	}
}

func TestConnectTunnel(t *testing.T) {
	echo := newEcho(t)
	fx := start(t, config{allow: "127.0.0.1:" + echo.port})

	// Bytes sent right behind the CONNECT, before the 200, are not lost.
	c, err := net.Dial("tcp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT 127.0.0.1:"+echo.port+" HTTP/1.1\r\n\r\nearly bytes")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	buf := make([]byte, len("early bytes"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "early bytes" {
		t.Fatalf("early bytes echoed as %q, %v", buf, err)
	}
	// Half-close passes through: the echo server sees EOF, finishes, and
	// the client reads everything and then EOF.
	io.WriteString(c, "last words")
	c.(*net.TCPConn).CloseWrite()
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "last words" {
		t.Errorf("after half-close: %q, %v", rest, err)
	}
}

func TestIdleTimeout(t *testing.T) {
	echo := newEcho(t)
	// Long enough that a loaded host's scheduling delays between two pings
	// (a quarter of it apart) do not look like silence.
	const idle = time.Second
	fx := start(t, config{allow: "127.0.0.1", opts: func(o *Options) { o.IdleTimeout = idle }})
	c, br := connect(t, fx.addr, "127.0.0.1:"+echo.port)
	defer c.Close()

	// Traffic keeps the tunnel open well past the idle timeout...
	var last time.Time
	for i := range 10 {
		msg := fmt.Sprintf("ping %d", i)
		io.WriteString(c, msg)
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("ping %d: %q %v", i, buf, err)
		}
		last = time.Now()
		time.Sleep(idle / 4)
	}
	// ...and silence ends it.
	expectIdleClose(t, c, br, idle, last)

	// Traffic in one direction only also counts: a download keeps the
	// tunnel open though the client sends nothing.
	ticks := tickServer(t, 10, idle/4)
	c2, br2 := connect(t, fx.addr, "127.0.0.1:"+ticks)
	defer c2.Close()
	for i := range 10 {
		line, err := br2.ReadString('\n')
		if err != nil || line != fmt.Sprintf("tick %d\n", i) {
			t.Fatalf("download tick %d: %q %v", i, line, err)
		}
		last = time.Now()
	}
	expectIdleClose(t, c2, br2, idle, last)
}

// expectIdleClose waits for the tunnel to close, which must come about
// idle after the last traffic the client saw (at last): not sooner (the
// proxy saw that traffic after the client sent it, so a little later
// still), and not much later.
func expectIdleClose(t *testing.T, c net.Conn, br *bufio.Reader, idle time.Duration, last time.Time) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5*idle + time.Second))
	n, err := br.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("idle tunnel read = %d, %v; want it closed", n, err)
	}
	if d := time.Since(last); d < idle/2 || d > 5*idle {
		t.Errorf("idle tunnel closed %v after the last traffic, want about %v", d, idle)
	}
}

// tickServer writes n lines, one every interval, to each client, then
// stays silent until the client goes away.
func tickServer(t *testing.T, n int, interval time.Duration) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				for i := range n {
					time.Sleep(interval)
					if _, err := fmt.Fprintf(c, "tick %d\n", i); err != nil {
						return
					}
				}
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				io.Copy(io.Discard, c)
			})
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return portOf(t, l.Addr())
}

func TestMaxConns(t *testing.T) {
	echo := newEcho(t)
	be := newBackend(t)
	fx := start(t, config{allow: "127.0.0.1", opts: func(o *Options) { o.MaxConns = 1 }})

	tunnel, _ := connect(t, fx.addr, "127.0.0.1:"+echo.port)
	resp, body := raw(t, fx.addr, "GET http://127.0.0.1:"+be.port+"/hello HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 503 || !strings.Contains(body, "too many concurrent connections (limit 1)") {
		t.Errorf("over the limit = %d %q", resp.StatusCode, body)
	}
	tunnel.Close()
	// The slot frees once the proxy notices the tunnel is gone.
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := raw(t, fx.addr, "GET http://127.0.0.1:"+be.port+"/hello HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot never freed: %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	echo := newEcho(t)
	be := newBackend(t)
	fx := start(t, config{allow: "127.0.0.1"})

	tunnel, br := connect(t, fx.addr, "127.0.0.1:"+echo.port)
	defer tunnel.Close()
	io.WriteString(tunnel, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatal(err)
	}
	// A keep-alive client connection, idle between requests.
	idle, err := net.Dial("tcp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET http://127.0.0.1:"+be.port+"/hello HTTP/1.1\r\nHost: x\r\n\r\n")
	ibr := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(ibr, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	// A client half-way through its headers.
	partial, err := net.Dial("tcp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer partial.Close()
	io.WriteString(partial, "GET http://127.0.0.1/ HTTP/1.1\r\n")

	closed := make(chan error, 1)
	go func() { closed <- fx.p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case err := <-fx.served:
		if err != nil {
			t.Errorf("Serve returned %v after Close, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	fx.served = nil // consumed

	for name, c := range map[string]net.Conn{"tunnel": tunnel, "keep-alive": idle, "partial": partial} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var r io.Reader = c
		if name == "tunnel" {
			r = br
		} else if name == "keep-alive" {
			r = ibr
		}
		if _, err := io.ReadAll(r); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s connection still open after Close", name)
		}
	}
	// The upstream side of the tunnel is closed too.
	echo.waitIdle(t)
	if _, err := net.Dial("tcp", fx.addr); err == nil {
		t.Error("listener still accepting after Close")
	}
	fx.p.mu.Lock()
	conns, clients := len(fx.p.conns), fx.p.clients
	fx.p.mu.Unlock()
	if conns != 0 || clients != 0 {
		t.Errorf("after Close: %d tracked connections, %d clients", conns, clients)
	}
	// Close is idempotent and Serve after Close returns at once.
	if err := fx.p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := fx.p.Serve(l); err != nil {
		t.Errorf("Serve after Close = %v", err)
	}
	if _, err := l.Accept(); err == nil {
		t.Error("Serve after Close left the listener open")
	}
}

func TestCloseWithoutServe(t *testing.T) {
	p := New(Policy{}, Options{Logger: testLogger(new(syncBuffer))})
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestDecisionLogging(t *testing.T) {
	be := newBackend(t)
	fx := start(t, config{allow: "127.0.0.1:" + be.port})
	c := fx.client(t)
	get(t, c, "http://127.0.0.1:"+be.port+"/hello")
	get(t, c, "http://127.0.0.1:"+be.port+"/hello")
	get(t, c, "http://denied.example/")
	raw(t, fx.addr, "GET /origin-form HTTP/1.1\r\nHost: x\r\n\r\n")

	var lines []string
	for l := range strings.SplitSeq(fx.logs.String(), "\n") {
		if strings.Contains(l, `msg="egress decision"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 4 {
		t.Fatalf("want 4 decision lines, got %d:\n%s", len(lines), fx.logs.String())
	}
	allowed := 0
	for _, l := range lines {
		for _, attr := range []string{"sandbox=run-42", "method=GET", "host=", "port=", "reason=", "addr="} {
			if !strings.Contains(l, attr) {
				t.Errorf("line lacks %s: %s", attr, l)
			}
		}
		if strings.Contains(l, "allowed=true") {
			allowed++
			if !strings.Contains(l, "addr=127.0.0.1:"+be.port) || !strings.Contains(l, "level=INFO") {
				t.Errorf("allowed line: %s", l)
			}
		} else if !strings.Contains(l, "allowed=false") || !strings.Contains(l, "level=WARN") {
			t.Errorf("refused line: %s", l)
		}
	}
	if allowed != 2 {
		t.Errorf("want 2 allowed lines, got %d", allowed)
	}
	if !strings.Contains(lines[2], `host=denied.example port=80 allowed=false reason="host \"denied.example\" is not on SANDBOX_NETWORK_ALLOW"`) {
		t.Errorf("refused line: %s", lines[2])
	}
	if n := len(fx.decisions()); n != 4 {
		t.Errorf("OnDecision called %d times, want 4", n)
	}
}

// ---- fuzzing ----------------------------------------------------------------

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"api.github.com, *.pypi.org", "[::1]:443,10.0.0.1:80", "*foo", "a..b",
		"host:99999", "::ffff:1.2.3.4", "[fe80::1%eth0]:1", "*.", "\u212a.com", " , "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			return
		}
		again, err := ParsePolicy(strings.Join(p.Allow, ","))
		if err != nil || !slices.Equal(again.Allow, p.Allow) {
			t.Fatalf("canonical form %q reparses as %q, %v", p.Allow, again.Allow, err)
		}
	})
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"example.com", "EXAMPLE.com.", "::ffff:127.0.0.1", "127.1", "bücher.de", "a..b"} {
		f.Add(s, "443")
	}
	f.Fuzz(func(t *testing.T, host, port string) {
		tg, err := parseTarget(host, port)
		if err != nil {
			return
		}
		if tg.port < 1 || tg.port > 65535 {
			t.Fatalf("port %d accepted", tg.port)
		}
		if tg.ip.IsValid() == (tg.name != "") {
			t.Fatalf("target %+v is neither or both name and IP", tg)
		}
		if tg.name != "" && checkName(tg.name) != nil {
			t.Fatalf("name %q accepted but invalid", tg.name)
		}
		if tg.ip.Is4In6() || tg.ip.Zone() != "" {
			t.Fatalf("address %v not normalized", tg.ip)
		}
	})
}

// ---- helpers ----------------------------------------------------------------

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// fakeResolver answers from a fixed table and counts lookups.
type fakeResolver struct {
	mu    sync.Mutex
	hosts map[string][]netip.Addr
	count map[string]int
}

func (f *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count[host]++
	if addrs, ok := f.hosts[host]; ok {
		return slices.Clone(addrs), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (f *fakeResolver) calls(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count[host]
}

func (f *fakeResolver) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.count {
		n += c
	}
	return n
}

type config struct {
	allow    string
	hosts    map[string][]string
	opts     func(*Options)
	before   func(*Proxy) // runs before Serve
	listener net.Listener // default: TCP on 127.0.0.1
}

type fixture struct {
	p      *Proxy
	addr   string
	url    *url.URL
	logs   *syncBuffer
	res    *fakeResolver
	served chan error

	mu   sync.Mutex
	seen []Decision
}

// start serves a proxy for the test and, at cleanup, closes it and checks
// that Serve returned nil and no goroutine of the proxy is left.
func start(t *testing.T, cfg config) *fixture {
	t.Helper()
	pol, err := ParsePolicy(cfg.allow)
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{logs: new(syncBuffer), res: &fakeResolver{
		hosts: map[string][]netip.Addr{}, count: map[string]int{}}}
	for h, addrs := range cfg.hosts {
		for _, a := range addrs {
			fx.res.hosts[h] = append(fx.res.hosts[h], netip.MustParseAddr(a))
		}
	}
	opts := Options{
		Logger:   testLogger(fx.logs),
		Resolver: fx.res,
		Label:    "run-42",
		OnDecision: func(d Decision) {
			fx.mu.Lock()
			fx.seen = append(fx.seen, d)
			fx.mu.Unlock()
		},
	}
	if cfg.opts != nil {
		cfg.opts(&opts)
	}
	fx.p = New(pol, opts)
	if cfg.before != nil {
		cfg.before(fx.p)
	}
	l := cfg.listener
	if l == nil {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	fx.addr = l.Addr().String()
	fx.url = &url.URL{Scheme: "http", Host: fx.addr}
	fx.served = make(chan error, 1)
	go func() { fx.served <- fx.p.Serve(l) }()
	t.Cleanup(func() {
		if err := fx.p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if fx.served != nil {
			select {
			case err := <-fx.served:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Serve did not return after Close")
			}
		}
		checkNoProxyGoroutines(t)
	})
	return fx
}

func (fx *fixture) decisions() []Decision {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return slices.Clone(fx.seen)
}

func (fx *fixture) lastDecision(t *testing.T) Decision {
	t.Helper()
	ds := fx.decisions()
	if len(ds) == 0 {
		t.Fatal("no decision recorded")
	}
	return ds[len(ds)-1]
}

func (fx *fixture) client(t *testing.T) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(fx.url), DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

var proxyFrame = regexp.MustCompile(`/internal/egress/[a-z]+\.go:`)

// checkNoProxyGoroutines waits for every goroutine running code of the
// package (not its tests) to end.
func checkNoProxyGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		var left []string
		for i, g := range strings.Split(string(buf), "\n\n") {
			if i > 0 && proxyFrame.MatchString(g) { // 0 is this goroutine
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines of the proxy still running after Close:\n%s", strings.Join(left, "\n\n"))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", u, err)
	}
	return resp, string(b)
}

// raw sends req as is on a fresh connection and reads one response.
func raw(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Write concurrently: the proxy may answer before reading everything.
	go io.WriteString(c, req)
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%.60q: reading response: %v", req, err)
	}
	defer resp.Body.Close()
	var b []byte
	if method != "CONNECT" || resp.StatusCode != 200 {
		b, _ = io.ReadAll(resp.Body)
	}
	return resp, string(b)
}

// connect opens a tunnel through the proxy.
func connect(t *testing.T, proxyAddr, target string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		c.Close()
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return c, br
}

func portOf(t *testing.T, a net.Addr) string {
	t.Helper()
	_, port, err := net.SplitHostPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

type backend struct {
	mux     *http.ServeMux
	port    string
	hits    atomic.Int64
	release chan struct{}
}

// newBackend is a plain HTTP server on 127.0.0.1, the only network here.
func newBackend(t *testing.T) *backend {
	be := &backend{mux: http.NewServeMux(), release: make(chan struct{})}
	be.mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		be.hits.Add(1)
		io.WriteString(w, "hello from backend")
	})
	be.mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		be.hits.Add(1)
		json.NewEncoder(w).Encode(struct {
			Host   string
			Header http.Header
		}{r.Host, r.Header})
	})
	be.mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		be.hits.Add(1)
		io.Copy(w, r.Body)
	})
	be.mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		be.hits.Add(1)
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-be.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second\n")
		w.Header().Set("X-Checksum", "abc")
	})
	srv := httptest.NewServer(be.mux)
	t.Cleanup(srv.Close)
	be.port = portOf(t, srv.Listener.Addr())
	return be
}

// rawBackend answers every connection's first request with response, as
// is, and closes.
func rawBackend(t *testing.T, response string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					io.WriteString(c, response)
				}
			})
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return portOf(t, l.Addr())
}

// echo is a TCP echo server that half-closes when its client does.
type echo struct {
	port  string
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newEcho(t *testing.T) *echo {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{port: portOf(t, l.Addr()), conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns[c] = true
			e.mu.Unlock()
			wg.Go(func() {
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c)
				c.Close()
				e.mu.Lock()
				delete(e.conns, c)
				e.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		e.mu.Lock()
		for c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		wg.Wait()
	})
	return e
}

// waitIdle waits until the echo server has no connection left.
func (e *echo) waitIdle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.mu.Lock()
		n := len(e.conns)
		e.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("echo server still has %d connections", n)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A program that is refused 200 times leaves 32 refusal lines in the log
// and, when its proxy closes, one line with how many more there were;
// OnDecision still hears of every refusal, and allowed requests are all
// logged.
func TestRefusalLoggingIsCapped(t *testing.T) {
	be := newBackend(t)
	fx := start(t, config{allow: "127.0.0.1:" + be.port})
	c := fx.client(t)
	for i := range 200 {
		get(t, c, fmt.Sprintf("http://denied-%d.example/", i))
	}
	get(t, c, "http://127.0.0.1:"+be.port+"/hello")
	if err := fx.p.Close(); err != nil {
		t.Fatal(err)
	}
	refused, allowed, summary := 0, 0, ""
	for l := range strings.SplitSeq(fx.logs.String(), "\n") {
		switch {
		case strings.Contains(l, `msg="egress decision"`) && strings.Contains(l, "allowed=false"):
			refused++
		case strings.Contains(l, `msg="egress decision"`):
			allowed++
		case strings.Contains(l, "refusals not logged"):
			summary = l
		}
	}
	if refused != 32 || allowed != 1 || !strings.Contains(summary, "more=168") || !strings.Contains(summary, "sandbox=run-42") {
		t.Fatalf("%d refusal lines, %d allowed, summary %q", refused, allowed, summary)
	}
	fx.mu.Lock()
	seen := len(fx.seen)
	fx.mu.Unlock()
	if seen != 201 {
		t.Fatalf("OnDecision heard of %d decisions, want 201", seen)
	}
}
