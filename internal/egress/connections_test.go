package egress

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

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
