package egress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A connection handed over is served as one accepted from a socket (here
// a refusal: the policy allows nothing), and one handed over after the
// proxy closed is closed, not left hanging.
func TestServeHandedOff(t *testing.T) {
	p := New(Policy{}, Options{Label: "handoff"})
	deliver := p.ServeHandedOff(3128)

	sandbox, proxy := net.Pipe()
	go deliver(proxy)
	sandbox.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(sandbox, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(sandbox), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a host the policy does not allow: status %d, want 403", resp.StatusCode)
	}
	sandbox.Close()

	p.Close()
	late, other := net.Pipe()
	deliver(other) // returns: nobody accepts any more
	late.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := late.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a connection handed over after Close: read %v, want it closed", err)
	}
}
