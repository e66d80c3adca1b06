package service_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// netDenied are the errors a connection out of the sandbox may end with:
// no route (empty network namespace) or refused by Landlock's TCP rules.
var netDenied = []string{"ENETUNREACH", "EACCES", "EPERM", "EHOSTUNREACH"}

// loopbackDenied adds ECONNREFUSED: inside, 127.0.0.1 is the sandbox's own
// loopback, where nothing listens.
var loopbackDenied = []string{"ENETUNREACH", "EACCES", "EPERM", "EHOSTUNREACH", "ECONNREFUSED"}

// --- Network ---------------------------------------------------------------

func TestContainment_01_PublicTCP(t *testing.T) {
	svc := newService(t)
	m := probe(t, svc, `
R("tcp_1.1.1.1_443", tcp(("1.1.1.1", 443)))
R("tcp_8.8.8.8_53", tcp(("8.8.8.8", 53)))
R("tcp6_2606:4700:4700::1111_443", tcp(("2606:4700:4700::1111", 443), socket.AF_INET6))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
R("udp_1.1.1.1_53", attempt(lambda: u.sendto(b"x", ("1.1.1.1", 53))))
`)
	expectAll(t, m, []string{"tcp_1.1.1.1_443", "tcp_8.8.8.8_53", "tcp6_2606:4700:4700::1111_443", "udp_1.1.1.1_53"}, netDenied...)
}

func TestContainment_02_DNS(t *testing.T) {
	svc := newService(t)
	m := probe(t, svc, `
for name in ("example.com", "metadata.google.internal", "codecage-test.invalid"):
    try:
        socket.getaddrinfo(name, 80)
        R("dns_" + name, "OK")
    except socket.gaierror:
        R("dns_" + name, "gaierror")
    except Exception as e:
        R("dns_" + name, type(e).__name__)
`)
	expectAll(t, m, []string{"dns_example.com", "dns_metadata.google.internal", "dns_codecage-test.invalid"}, "gaierror")
}

func TestContainment_03_CloudMetadata(t *testing.T) {
	svc := newService(t)
	m := probe(t, svc, `
R("tcp_169.254.169.254_80", tcp(("169.254.169.254", 80)))
R("tcp_100.100.100.200_80", tcp(("100.100.100.200", 80)))
R("tcp6_fd00:ec2::254_80", tcp(("fd00:ec2::254", 80), socket.AF_INET6))
`)
	expectAll(t, m, []string{"tcp_169.254.169.254_80", "tcp_100.100.100.200_80", "tcp6_fd00:ec2::254_80"}, netDenied...)
}

func TestContainment_04_HostLoopbackListener(t *testing.T) {
	svc := newService(t)
	lo := newHostRecorder(t, "tcp4", "127.0.0.1:0")
	all := newHostRecorder(t, "tcp", ":0") // every host address
	loPort := lo.ln.Addr().(*net.TCPAddr).Port
	allPort := all.ln.Addr().(*net.TCPAddr).Port

	// The host's own non-loopback addresses, reached through any route the
	// sandbox might have.
	var targets []string
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		fam := "socket.AF_INET"
		if ipn.IP.To4() == nil {
			fam = "socket.AF_INET6"
		}
		targets = append(targets, fmt.Sprintf("(%q, %s)", ipn.IP.String(), fam))
	}
	m := probe(t, svc, fill(`
R("lo", tcp(("127.0.0.1", @@LOPORT@@)))
R("lo_all", tcp(("127.0.0.1", @@ALLPORT@@)))
R("lo6_all", tcp(("::1", @@ALLPORT@@), socket.AF_INET6))
bad = []
for ip, fam in [@@TARGETS@@]:
    r = tcp((ip, @@ALLPORT@@), fam)
    if r not in ("ENETUNREACH", "EACCES", "EPERM", "EHOSTUNREACH", "ECONNREFUSED"):
        bad.append("%s=%s" % (ip, r))
R("host_ips", ",".join(bad) or "denied")
`, "LOPORT", strconv.Itoa(loPort), "ALLPORT", strconv.Itoa(allPort), "TARGETS", strings.Join(targets, ", ")))
	// Inside, 127.0.0.1 is the sandbox's own loopback: nothing listens.
	expectAll(t, m, []string{"lo", "lo_all", "lo6_all"}, loopbackDenied...)
	expectOneOf(t, m, "host_ips", "denied")
	lo.expectNoHits(t)
	all.expectNoHits(t)
}

func TestContainment_05_SelfSSRF(t *testing.T) {
	svc := newService(t)
	var hits atomic.Int64
	// Stand-in for the server's own HTTP port (the product has no HTTP
	// server yet): an HTTP server on the host loopback.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("codecage-server"))
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	m := probe(t, svc, fill(`
import urllib.request
R("tcp", tcp(("127.0.0.1", @@PORT@@)))
try:
    body = urllib.request.urlopen("@@URL@@/", timeout=3).read()
    R("http", "OK:" + body.decode(errors="replace"))
except Exception as e:
    reason = getattr(e, "reason", None)
    R("http", ename(reason.errno) if isinstance(reason, OSError) and reason.errno else type(e).__name__)
`, "PORT", strconv.Itoa(port), "URL", srv.URL))
	expectAll(t, m, []string{"tcp", "http"}, loopbackDenied...)
	if n := hits.Load(); n != 0 {
		t.Errorf("the host HTTP server got %d requests from the sandbox", n)
	}
	// The server itself was up all along.
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatalf("host-side request to the stand-in server: %v", err)
	}
	resp.Body.Close()
}

func TestContainment_06_VSOCK(t *testing.T) {
	svc := newService(t)
	m := probe(t, svc, `
R("vsock_stream", attempt(lambda: socket.socket(40, socket.SOCK_STREAM)))
R("vsock_dgram", attempt(lambda: socket.socket(40, socket.SOCK_DGRAM)))
`)
	expectAll(t, m, []string{"vsock_stream", "vsock_dgram"}, "EPERM")
}

func TestContainment_07_HostUnixSockets(t *testing.T) {
	svc := newService(t)
	path := filepath.Join(t.TempDir(), "host.sock")
	byPath := newHostRecorder(t, "unix", path)
	abstract := "codecage-test-" + randomToken(t)
	byName := newHostRecorder(t, "unix", "@"+abstract)
	m := probe(t, svc, fill(`
def uconn(addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
        s.sendall(b"from-the-sandbox")
        return "OK"
    except OSError as e:
        return ename(e.errno) if e.errno else type(e).__name__
    finally:
        s.close()
R("path_host_tempdir", uconn("@@PATH@@"))
R("abstract_host", uconn("\0@@ABSTRACT@@"))
for p in ("/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock",
          "/run/dbus/system_bus_socket", "/run/systemd/private", "/run/systemd/journal/stdout"):
    R("path_" + p, uconn(p))
`, "PATH", path, "ABSTRACT", abstract))
	keys := []string{"path_host_tempdir", "abstract_host"}
	for _, p := range []string{"/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock",
		"/run/dbus/system_bus_socket", "/run/systemd/private", "/run/systemd/journal/stdout"} {
		keys = append(keys, "path_"+p)
	}
	expectAll(t, m, keys, "ENOENT", "ECONNREFUSED")
	byPath.expectNoHits(t)
	byName.expectNoHits(t)
}
