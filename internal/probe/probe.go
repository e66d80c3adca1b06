// Package probe is what tests use to judge a server from outside, as a
// client or an operator would: the values of its /metrics, and a client
// that stops reading. Tests only; it knows nothing of codecage's packages.
package probe

import (
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

// WaitLetGo waits up to within for the server at the other end of c (a
// process on this host) to let go of it: no socket of its own is left for
// the connection in /proc/net/tcp{,6}, or only one that no descriptor
// holds and that is no longer established (closed, its last bytes and FIN
// queued behind a client that reads nothing; an established one without
// a descriptor is still in the accept queue). It does not read from c: a
// read would unstall a client that stopped reading. It fails the test at
// within.
func WaitLetGo(t testing.TB, c net.Conn, within time.Duration) {
	t.Helper()
	local, _ := c.RemoteAddr().(*net.TCPAddr) // the server's side
	remote, _ := c.LocalAddr().(*net.TCPAddr)
	if local == nil || remote == nil {
		t.Fatalf("WaitLetGo: %v is not a TCP connection", c.RemoteAddr())
	}
	for deadline := time.Now().Add(within); heldBy(local, remote); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server at %v still holds the connection from %v after %v", local, remote, within)
		}
	}
}

// heldBy reports whether a socket with local and remote addresses is open
// in a descriptor (its inode is not 0), or waits in an accept queue
// (established, no descriptor yet), on this host.
func heldBy(local, remote *net.TCPAddr) bool {
	const established = "01"
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(file)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || (f[9] == "0" && f[3] != established) {
				continue
			}
			if l, ok := procAddr(f[1]); ok && l.IP.Equal(local.IP) && l.Port == local.Port {
				if r, ok := procAddr(f[2]); ok && r.IP.Equal(remote.IP) && r.Port == remote.Port {
					return true
				}
			}
		}
	}
	return false
}

// procAddr parses an address of /proc/net/tcp{,6}: the IP as 32-bit
// words in the host's byte order (little-endian on the hosts this runs
// on), a colon, the port in hex.
func procAddr(s string) (*net.TCPAddr, bool) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(ipHex)
	port, perr := strconv.ParseUint(portHex, 16, 16)
	if !ok || err != nil || perr != nil || (len(raw) != 4 && len(raw) != 16) {
		return nil, false
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	return &net.TCPAddr{IP: ip, Port: int(port)}, true
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
