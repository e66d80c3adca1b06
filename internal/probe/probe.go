// Package probe is what tests use to judge a server from outside, as a
// client or an operator would: the values of its /metrics, and a client
// that stops reading. Tests only; it knows nothing of codecage's packages.
package probe

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Metric sums the samples of the metric name in url's /metrics, over all
// its labels; it fails the test when there is none.
func Metric(t testing.TB, url, name string) float64 {
	t.Helper()
	body := metrics(t, url)
	ms := regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`(?:\{[^}]*\})? (\S+)$`).FindAllStringSubmatch(body, -1)
	if ms == nil {
		t.Fatalf("no %s in %s/metrics", name, url)
	}
	sum := 0.0
	for _, m := range ms {
		v, _ := strconv.ParseFloat(m[1], 64)
		sum += v
	}
	return sum
}

// MetricLine is the value of the first /metrics line that starts with
// prefix (a name with its labels), -1 when there is none.
func MetricLine(t testing.TB, url, prefix string) float64 {
	t.Helper()
	for _, line := range strings.Split(metrics(t, url), "\n") {
		if strings.HasPrefix(line, prefix) {
			f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return f
		}
	}
	return -1
}

func metrics(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// DialStalled opens a TCP connection to addr with a 4 KiB receive buffer
// and sends req (a whole HTTP request) on it; the caller then never reads,
// as a client that stopped reading. The connection closes with the test.
func DialStalled(t testing.TB, addr, req string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c
}

// PostMCP POSTs body (a JSON-RPC frame) to url as an MCP client does,
// accepting JSON or an event stream, with header added; it returns the
// answer and its whole body.
func PostMCP(t testing.TB, url, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
