package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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

func portOf(t testing.TB, a net.Addr) string {
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
