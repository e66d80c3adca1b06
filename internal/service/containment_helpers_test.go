package service_test

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// pyPrelude is prepended to every containment snippet. R prints one
// machine-checkable line "RESULT <key> <value>"; sc runs a raw syscall and
// returns "OK" or the errno name; attempt runs a callable and returns "OK",
// the errno name of an OSError, or the exception type.
const pyPrelude = `import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def R(key, value):
    print("RESULT", key, value, flush=True)

def ename(e):
    return errno.errorcode.get(e, str(e))

def _arg(a):
    if isinstance(a, int):
        return ctypes.c_long(a)
    if isinstance(a, str):
        return ctypes.c_char_p(a.encode())
    return a

def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    if r == 0 and nr in (56, 435):
        os._exit(0)  # a namespace clone that succeeded: the child must not go on
    return "OK" if r != -1 else ename(ctypes.get_errno())

def attempt(fn):
    try:
        fn()
        return "OK"
    except OSError as e:
        return ename(e.errno) if e.errno else type(e).__name__
    except Exception as e:
        return type(e).__name__

def tcp(addr, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
        s.sendall(b"from-the-sandbox")
        return "OK"
    except OSError as e:
        return ename(e.errno) if e.errno else type(e).__name__
    finally:
        s.close()

`

// probe runs prelude+snippet with the import policy off, requires a
// successful run, and returns the RESULT lines as key -> value.
func probe(t *testing.T, svc *service.Service, snippet string, opts ...func(*service.Request)) map[string]string {
	t.Helper()
	res := run(t, svc, pyPrelude+snippet, opts...)
	mustSucceed(t, res)
	m := results(res)
	t.Logf("results: %v", m)
	return m
}

// logResult records the outcome of a run for -v readers.
func logResult(t *testing.T, res *service.Result) {
	t.Helper()
	limit := "none"
	if res.Limit != nil {
		limit = *res.Limit
	}
	stdout := res.Stdout
	if len(stdout) > 300 {
		stdout = stdout[:300] + "..."
	}
	t.Logf("success=%v error=%+v limit=%s timedOut=%v oom=%v truncated=%v exit=%d time=%.2fs stdout=%q",
		res.Success, res.Error, limit, res.TimedOut, res.OOMKilled, res.Truncated, res.ExitCode, res.ExecutionTime, stdout)
}

// results parses the "RESULT <key> <value>" lines of a run's stdout.
func results(res *service.Result) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(res.Stdout, "\n") {
		rest, ok := strings.CutPrefix(line, "RESULT ")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(rest, " ")
		out[k] = v
	}
	return out
}

// expectOneOf fails unless m[key] is one of want (a missing key fails too).
func expectOneOf(t *testing.T, m map[string]string, key string, want ...string) {
	t.Helper()
	got, ok := m[key]
	if !ok {
		t.Errorf("%s: no result line (results: %v)", key, m)
		return
	}
	if !slices.Contains(want, got) {
		t.Errorf("%s = %q, want one of %q", key, got, want)
	}
}

// expectAll applies expectOneOf to every key.
func expectAll(t *testing.T, m map[string]string, keys []string, want ...string) {
	t.Helper()
	for _, k := range keys {
		expectOneOf(t, m, k, want...)
	}
}

func randomToken(t *testing.T) string {
	t.Helper()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// fill replaces @@NAME@@ placeholders in a snippet.
func fill(snippet string, kv ...string) string {
	for i := 0; i+1 < len(kv); i += 2 {
		snippet = strings.ReplaceAll(snippet, "@@"+kv[i]+"@@", kv[i+1])
	}
	return snippet
}

// hostRecorder is a listener on the host that records every connection it
// accepts (and what the peer sent first).
type hostRecorder struct {
	ln   net.Listener
	mu   sync.Mutex
	hits []string
	done chan struct{}
}

func newHostRecorder(t *testing.T, network, addr string) *hostRecorder {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	h := &hostRecorder{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			buf := make([]byte, 64)
			n, _ := c.Read(buf)
			h.mu.Lock()
			from := "?" // an unnamed unix socket may have no address
			if a := c.RemoteAddr(); a != nil {
				from = a.String()
			}
			h.hits = append(h.hits, from+" "+string(buf[:n]))
			h.mu.Unlock()
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-h.done
	})
	return h
}

func (h *hostRecorder) Hits() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.hits)
}

// expectNoHits fails on any connection the listener took, judged once a
// connection of the test's own, made now, has been recorded: the
// listener takes connections in order, so one in flight before it is
// recorded by then, however slow the host.
func (h *hostRecorder) expectNoHits(t *testing.T) {
	t.Helper()
	mark := "codecage-test-mark-" + randomToken(t)
	c, err := net.Dial(h.ln.Addr().Network(), h.ln.Addr().String())
	if err != nil {
		t.Fatalf("the test's own connection to %s: %v", h.ln.Addr(), err)
	}
	_, _ = io.WriteString(c, mark)
	c.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		i := slices.IndexFunc(h.hits, func(hit string) bool { return strings.HasSuffix(hit, " "+mark) })
		if i >= 0 {
			h.hits = slices.Delete(h.hits, i, i+1)
		}
		h.mu.Unlock()
		if i >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host listener %s did not record the test's own connection within 20 s", h.ln.Addr())
		}
	}
	if hits := h.Hits(); len(hits) > 0 {
		t.Errorf("the host listener %s accepted connections from the sandbox: %q", h.ln.Addr(), hits)
	}
}

// mountPoints lists the host's mount points that this process's services
// may have made, one entry per mount (a point mounted twice is there
// twice): those below its temporary directory or the default state
// directory (scripts/test.sh gives each test binary both of its own), and
// those in a directory named after this process ("<pid>-...", as gVisor's
// bundles are). Other processes' mounts (test packages run side by side)
// are not this test's to judge.
func mountPoints(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	roots := []string{filepath.Clean(os.TempDir()), filepath.Clean(config.DefaultConfig().StateDir)}
	named := "/" + strconv.Itoa(os.Getpid()) + "-"
	ours := func(p string) bool {
		for _, r := range roots {
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return strings.Contains(p, named)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) > 4 && ours(f[4]) {
			out = append(out, f[4])
		}
	}
	sort.Strings(out)
	return out
}

// mountsAdded are the entries of after that before lacks (as multisets).
func mountsAdded(before, after []string) []string {
	left := map[string]int{}
	for _, p := range before {
		left[p]++
	}
	var out []string
	for _, p := range after {
		if left[p] > 0 {
			left[p]--
			continue
		}
		out = append(out, p)
	}
	return out
}

// expectResponsive runs print(1) and fails unless it works: the service
// still serves after an attack.
func expectResponsive(t *testing.T, svc *service.Service) {
	t.Helper()
	res := run(t, svc, "print(1)", withTimeout(20*time.Second))
	if out := mustSucceed(t, res); out != "1\n" {
		t.Fatalf("follow-up execution printed %q, want %q", out, "1\n")
	}
}

// onGVisor reports whether the suite runs against the gVisor backend
// (CODECAGE_TEST_BACKEND=gvisor). Where gVisor's kernel answers an attack
// differently from the host's (another errno, or an /proc entry of its own
// init), a row states both expectations and why.
func onGVisor() bool { return os.Getenv("CODECAGE_TEST_BACKEND") == config.IsolationGVisor }

// either returns native, or gv when the suite runs against gVisor.
func either(native, gv []string) []string {
	if onGVisor() {
		return gv
	}
	return native
}
