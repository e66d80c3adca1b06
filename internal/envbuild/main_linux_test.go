package envbuild

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/reexec"
)

func TestMain(m *testing.M) {
	reexec.Run() // runs the confinement helper when re-executed as it
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// shared is the one Debian build the package's tests share (python3-minimal),
// made while a probe inside the build tries to reach the host.
var shared struct {
	once     sync.Once
	dir      string // removed by TestMain
	root     string
	err      error
	took     time.Duration
	log      string
	probe    string // what the probe inside the build saw
	heard    *listeners
	probeRan bool
}

// listeners are host-side listeners that count every connection they get:
// on the host's loopback and on each of its other addresses.
type listeners struct {
	addrs []string
	count atomic.Int64
}

func listenEverywhere(t testing.TB) *listeners {
	ls := &listeners{}
	ips := []string{"127.0.0.1"}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				ips = append(ips, n.IP.String())
			}
		}
	}
	for _, ip := range ips {
		l, err := net.Listen("tcp4", ip+":0")
		if err != nil {
			t.Fatal(err)
		}
		ls.addrs = append(ls.addrs, l.Addr().String())
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				ls.count.Add(1)
				c.Close()
			}
		}()
		if tt, ok := t.(*testing.T); ok {
			tt.Cleanup(func() { l.Close() })
		}
	}
	return ls
}

// probeScript tries each address directly and through the build's proxy,
// and writes what happened to out. It runs as a customize hook: in the
// build's namespaces, on the host's python.
const probeScript = `import socket, sys, urllib.request
out = open(sys.argv[1], "w")
for a in sys.argv[2:]:
    h, p = a.rsplit(":", 1)
    try:
        socket.create_connection((h, int(p)), timeout=3).close()
        out.write("direct %s: CONNECTED\n" % a)
    except OSError as e:
        out.write("direct %s: %s\n" % (a, e))
    try:
        r = urllib.request.urlopen("http://%s/" % a, timeout=5)
        out.write("proxy %s: CONNECTED %s\n" % (a, r.status))
    except Exception as e:
        out.write("proxy %s: %s\n" % (a, e))
`

func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: scripts/setup.sh installs it (%v)", tool, err)
		}
	}
}

// sharedRoot builds the shared root once and returns it.
func sharedRoot(t *testing.T) string {
	t.Helper()
	requireTools(t, "mmdebstrap")
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "envbuild-test-")
		if shared.err != nil {
			return
		}
		shared.heard = listenEverywhere(t)
		probeOut := filepath.Join(shared.dir, "probe.txt")
		script := filepath.Join(shared.dir, "probe.py")
		if shared.err = os.WriteFile(script, []byte(probeScript), 0o644); shared.err != nil {
			return
		}
		hook := fmt.Sprintf("/usr/bin/python3 %s %s %s", script, probeOut, strings.Join(shared.heard.addrs, " "))
		shared.root = filepath.Join(shared.dir, "root")
		var log strings.Builder
		start := time.Now()
		shared.err = Debian(context.Background(), DebianOptions{
			Packages:       []string{"python3-minimal"},
			CustomizeHooks: []string{hook},
			CacheDir:       sharedCache(),
		}, shared.root, &log)
		shared.took = time.Since(start)
		shared.log = log.String()
		if b, err := os.ReadFile(probeOut); err == nil {
			shared.probe, shared.probeRan = string(b), true
		}
	})
	if shared.err != nil {
		t.Fatalf("the shared Debian build: %v\n%s", shared.err, tailOf(shared.log))
	}
	t.Logf("the shared Debian build (python3-minimal) took %v", shared.took.Round(time.Millisecond))
	return shared.root
}

// sharedCache is the tests' .deb cache, the machine's (envfixture.DebCache):
// the first build fills it, and the others (here and in other packages) reuse it.
func sharedCache() string { return envfixture.DebCache() }

func tailOf(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}
