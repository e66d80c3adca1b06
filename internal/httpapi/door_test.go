package httpapi_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A Content-Length over SANDBOX_MAX_BODY_SIZE is answered 413 at once,
// before the body is read (the client never has to send it), not after
// the read timeout.
func TestAbsurdContentLengthIs413AtOnce(t *testing.T) {
	ts := startServer(t, "", nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	if _, err := io.WriteString(c, "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 9223372036854775807\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("answered after %v, not at once", took)
	}
	wantProblem(t, resp, 413, "too_large")
}

// A command over the kernel's argument bound is the caller's error: 400
// invalid_request saying so (clients retry a 503), before anything runs.
func TestArgumentListTooLongIs400(t *testing.T) {
	ts := startServer(t, "", nil)
	p := wantProblem(t, ts.call(t, "POST", "/commands", "", map[string]any{"command": "echo " + strings.Repeat("x", 200<<10)}, nil), 400, "invalid_request")
	if !strings.Contains(p.Detail, "argument list too long") || !strings.Contains(p.Detail, "131071") {
		t.Errorf("detail %q: want the limit named", p.Detail)
	}
}
