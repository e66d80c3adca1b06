package e2b_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
)

// sandboxDoor is a sandbox's daemon, called with hand-made requests: what a
// hostile client sends, not what an SDK would.
type sandboxDoor struct {
	t         *testing.T
	addr      string // host:port of the server
	id, token string
}

func newSandboxDoor(t *testing.T) *sandboxDoor {
	srv, _ := newServer(t)
	status, created := call(t, "POST", srv.URL+"/v2/sandboxes", `{"templateID": "base", "timeout": 120}`, map[string]string{"X-API-KEY": aliceKey})
	if status != 201 {
		t.Fatalf("create: %d %v", status, created)
	}
	u, _ := url.Parse(srv.URL)
	return &sandboxDoor{t: t, addr: u.Host, id: created["sandboxID"].(string), token: created["envdAccessToken"].(string)}
}

// raw sends head (the request line and headers, without the blank line)
// and then body, written by a goroutine (a server may answer before it
// reads it all), and returns the answer's status, headers and body, and
// how long the answer took.
func (d *sandboxDoor) raw(head string, body io.Reader) (*http.Response, []byte, time.Duration) {
	d.t.Helper()
	c, err := net.Dial("tcp", d.addr)
	if err != nil {
		d.t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	head = strings.ReplaceAll(head, "{auth}", "E2b-Sandbox-Id: "+d.id+"\r\nX-Access-Token: "+d.token)
	start := time.Now()
	if _, err := io.WriteString(c, head+"\r\n\r\n"); err != nil {
		d.t.Fatal(err)
	}
	if body != nil {
		go func() { _, _ = io.Copy(c, body) }()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		d.t.Fatalf("no answer to %q: %v", strings.SplitN(head, "\r\n", 2)[0], err)
	}
	got, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp, got, time.Since(start)
}

// connectError is the code and message of a Connect answer: a unary
// error body, or a stream's end message.
func connectError(t *testing.T, resp *http.Response, body []byte) (code, msg string) {
	t.Helper()
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Error   *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/connect+") {
		for len(body) >= 5 {
			n := int(binary.BigEndian.Uint32(body[1:5]))
			if 5+n > len(body) {
				break
			}
			if body[0]&2 != 0 {
				msg := body[5 : 5+n]
				if body[0]&1 != 0 { // compressed as the request was
					if zr, err := gzip.NewReader(bytes.NewReader(msg)); err == nil {
						msg, _ = io.ReadAll(io.LimitReader(zr, 1<<20))
					}
				}
				_ = json.Unmarshal(msg, &e)
			}
			body = body[5+n:]
		}
		if e.Error != nil {
			return e.Error.Code, e.Error.Message
		}
		return "", ""
	}
	_ = json.Unmarshal(body, &e)
	return e.Code, e.Message
}

func envelope(flags byte, msg []byte) []byte {
	out := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// bomb is gzip of a Stat request whose path inflates to n bytes.
func bomb(t *testing.T, n int) []byte {
	var buf bytes.Buffer
	z, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = io.WriteString(z, `{"path":"`)
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for range n >> 20 {
		_, _ = z.Write(chunk)
	}
	_, _ = io.WriteString(z, `"}`)
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// allocated is the bytes this process allocated while f ran: the server
// runs in it, so an inflated or buffered body shows.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

const (
	statHead  = "POST /filesystem.Filesystem/Stat HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Port: 49983\r\n{auth}\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1"
	startHead = "POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Port: 49983\r\n{auth}\r\nContent-Type: application/connect+json\r\nConnect-Protocol-Version: 1"
)

// The Connect procedures hold SANDBOX_MAX_BODY_SIZE (1 MiB here) as REST
// does, on the body as sent and as inflated: a larger one is refused at
// once with resource_exhausted, without the server reading, inflating or
// echoing it; and an error quotes a short prefix of the input only.
func TestConnectBodyLimits(t *testing.T) {
	d := newSandboxDoor(t)
	quick := func(name string, took time.Duration) {
		if took > 2*time.Second {
			t.Errorf("%s: answered after %v, not at once", name, took)
		}
	}
	refused := func(name string, resp *http.Response, body []byte) {
		t.Helper()
		if code, msg := connectError(t, resp, body); code != "resource_exhausted" || !strings.Contains(msg, "SANDBOX_MAX_BODY_SIZE") {
			t.Errorf("%s: %d %q, want resource_exhausted naming SANDBOX_MAX_BODY_SIZE", name, resp.StatusCode, body)
		}
		if len(body) > 1024 {
			t.Errorf("%s: a %d-byte answer", name, len(body))
		}
	}

	// A Content-Length of 200 MB: answered before a byte of the body.
	resp, body, took := d.raw(statHead+"\r\nContent-Length: 209715200", nil)
	refused("Content-Length 200 MB", resp, body)
	quick("Content-Length 200 MB", took)

	// 64 MiB chunked (no length said): cut at the limit.
	var n uint64
	n = allocated(func() {
		resp, body, took = d.raw(statHead+"\r\nTransfer-Encoding: chunked", chunked(io.MultiReader(strings.NewReader(`{"path":"`), zeros('a', 64<<20))))
	})
	refused("64 MiB chunked", resp, body)
	quick("64 MiB chunked", took)
	if n > 24<<20 {
		t.Errorf("64 MiB chunked: the server allocated %d MiB", n>>20)
	}

	// 64 MiB of path in 64 KiB of gzip, unary and in a stream's envelope.
	gz := bomb(t, 64<<20)
	n = allocated(func() {
		resp, body, took = d.raw(statHead+"\r\nContent-Encoding: gzip\r\nContent-Length: "+fmt.Sprint(len(gz)), bytes.NewReader(gz))
	})
	refused("gzip unary", resp, body)
	quick("gzip unary", took)
	if n > 24<<20 {
		t.Errorf("gzip unary: the server allocated %d MiB inflating %d bytes", n>>20, len(gz))
	}
	env := envelope(1, gz)
	n = allocated(func() {
		resp, body, took = d.raw(startHead+"\r\nConnect-Content-Encoding: gzip\r\nContent-Length: "+fmt.Sprint(len(env)), bytes.NewReader(env))
	})
	refused("gzip stream", resp, body)
	quick("gzip stream", took)
	if n > 24<<20 {
		t.Errorf("gzip stream: the server allocated %d MiB inflating %d bytes", n>>20, len(gz))
	}

	// Within the limit, a bad path's error quotes a short prefix of it.
	long := `{"path":"` + strings.Repeat("a", 900<<10) + `"}`
	resp, body, _ = d.raw(statHead+"\r\nContent-Length: "+fmt.Sprint(len(long)), strings.NewReader(long))
	if code, msg := connectError(t, resp, body); code != "invalid_argument" || len(body) > 1024 || !strings.Contains(msg, "921600 bytes") {
		t.Errorf("a 900 KiB path: %d, %d bytes: %.300q", resp.StatusCode, len(body), body)
	}
}

// Bodies the client broke are the client's error: invalid_argument, not
// internal or unknown (a 500).
func TestConnectClientGarbageIsInvalidArgument(t *testing.T) {
	d := newSandboxDoor(t)
	msg := []byte(`{"process":{"cmd":"true"}}`)
	truncated := envelope(0, msg)[:5+10]
	resp, body, _ := d.raw(startHead+"\r\nContent-Length: "+fmt.Sprint(len(truncated)), bytes.NewReader(truncated))
	if code, text := connectError(t, resp, body); code != "invalid_argument" || !strings.Contains(text, "envelope") {
		t.Errorf("a truncated envelope: %d %q, want invalid_argument", resp.StatusCode, body)
	}
	resp, body, _ = d.raw(statHead+"\r\nTransfer-Encoding: chunked", strings.NewReader("5\r\n{\"pat\r\nZZ-not-a-chunk-size\r\n"))
	if code, _ := connectError(t, resp, body); code != "invalid_argument" || resp.StatusCode >= 500 {
		t.Errorf("a broken chunked body: %d %q, want 400 invalid_argument", resp.StatusCode, body)
	}
}

// The E2B surface refuses text that is not valid Unicode, naming the
// field, as REST and MCP do, instead of running other bytes than were
// sent (U+FFFD).
func TestE2BRefusesInvalidUTF8(t *testing.T) {
	d := newSandboxDoor(t)
	start := envelope(0, []byte("{\"process\":{\"cmd\":\"/bin/echo\",\"args\":[\"ok\",\"\xff\"]}}"))
	resp, body, _ := d.raw(startHead+"\r\nContent-Length: "+fmt.Sprint(len(start)), bytes.NewReader(start))
	if code, msg := connectError(t, resp, body); code != "invalid_argument" || !strings.Contains(msg, "process.args[1]") {
		t.Errorf("args: %d %q", resp.StatusCode, body)
	}
	for field, doc := range map[string]string{
		"process.envs.A": `{"process":{"cmd":"/bin/true","envs":{"A":"\udc80"}}}`,
		"process.cwd":    "{\"process\":{\"cmd\":\"/bin/true\",\"cwd\":\"/home/user/\xc3\"}}",
	} {
		env := envelope(0, []byte(doc))
		resp, body, _ := d.raw(startHead+"\r\nContent-Length: "+fmt.Sprint(len(env)), bytes.NewReader(env))
		if code, msg := connectError(t, resp, body); code != "invalid_argument" || !strings.Contains(msg, field) {
			t.Errorf("%s: %d %q", field, resp.StatusCode, body)
		}
	}
	stat := "{\"path\":\"/home/user/\xfe\"}"
	resp, body, _ = d.raw(statHead+"\r\nContent-Length: "+fmt.Sprint(len(stat)), strings.NewReader(stat))
	if code, msg := connectError(t, resp, body); code != "invalid_argument" || !strings.Contains(msg, "path") {
		t.Errorf("stat path: %d %q", resp.StatusCode, body)
	}
	exec := "POST /execute HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Port: 49999\r\n{auth}\r\nContent-Type: application/json"
	for field, doc := range map[string]string{
		"code":       "{\"code\":\"print('\xff')\"}",
		"env_vars.X": "{\"code\":\"1\",\"env_vars\":{\"X\":\"\xe2\x82\"}}",
	} {
		resp, body, _ := d.raw(exec+"\r\nContent-Length: "+fmt.Sprint(len(doc)), strings.NewReader(doc))
		if resp.StatusCode != 400 || !strings.Contains(string(body), field) || !strings.Contains(string(body), "UTF-8") {
			t.Errorf("execute %s: %d %q", field, resp.StatusCode, body)
		}
	}
	create := "{\"templateID\":\"base\",\"metadata\":{\"k\":\"\xff\"}}"
	resp, body, _ = d.raw("POST /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-KEY: "+aliceKey+"\r\nContent-Type: application/json\r\nContent-Length: "+fmt.Sprint(len(create)), strings.NewReader(create))
	if resp.StatusCode != 400 || !strings.Contains(string(body), "metadata.k") {
		t.Errorf("create metadata: %d %q", resp.StatusCode, body)
	}
	// The plain routes hold the body limit too: 413 at once.
	resp, _, took := d.raw(exec+"\r\nContent-Length: 9223372036854775807", nil)
	if resp.StatusCode != 413 || took > 2*time.Second {
		t.Errorf("execute with an absurd Content-Length: %d after %v", resp.StatusCode, took)
	}
}

// An argument over the kernel's bound is the caller's error
// (invalid_argument, which clients do not retry), said before anything
// runs, not a server's "unavailable".
func TestE2BArgumentListTooLong(t *testing.T) {
	d := newSandboxDoor(t)
	doc, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/echo", "args": []string{strings.Repeat("x", 200<<10)}}})
	env := envelope(0, doc)
	resp, body, _ := d.raw(startHead+"\r\nContent-Length: "+fmt.Sprint(len(env)), bytes.NewReader(env))
	if code, msg := connectError(t, resp, body); code != "invalid_argument" || !strings.Contains(msg, "argument list too long") {
		t.Errorf("a 200 KiB argument: %d %.300q", resp.StatusCode, body)
	}
}

// chunked encodes r as an HTTP/1.1 chunked body.
func chunked(r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if _, werr := fmt.Fprintf(pw, "%x\r\n%s\r\n", n, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				_, _ = io.WriteString(pw, "0\r\n\r\n")
				pw.Close()
				return
			}
		}
	}()
	return pr
}

// zeros is n bytes of c, made as read.
func zeros(c byte, n int64) io.Reader {
	return io.LimitReader(repeat(c), n)
}

type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}
