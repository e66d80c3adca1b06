package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serverCode listens on 127.0.0.1:port and answers each connection with
// "from <name>", until killed.
func serverCode(name string, port int) []string {
	return python(fmt.Sprintf(`import socket
s = socket.socket()
s.bind(("127.0.0.1", %d))
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(b"from %s")
    c.close()`, port, name))
}

// startServer starts a sandbox serving on port (in ns when not nil) and
// waits until the host reaches it through its namespace.
func startServer(t *testing.T, name string, port int, ns *NetNS) (*Sandbox, *NetNS) {
	t.Helper()
	sb, err := Start(context.Background(), Spec{Argv: serverCode(name, port), LoopbackServers: true, NetNS: ns})
	if err != nil {
		t.Fatalf("Start %s: %v", name, err)
	}
	t.Cleanup(func() {
		sb.Kill(LimitNone)
		sb.Wait()
		sb.Channel().Close()
	})
	own, err := sb.NetNS()
	if err != nil {
		t.Fatalf("NetNS of %s: %v", name, err)
	}
	t.Cleanup(func() { own.Close() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := own.DialPort(context.Background(), port)
		if err == nil {
			b, _ := io.ReadAll(c)
			c.Close()
			if string(b) != "from "+name {
				t.Fatalf("the host read %q from %s's port", b, name)
			}
			return sb, own
		}
		if time.Now().After(deadline) || !errors.Is(err, ErrPortClosed) {
			t.Fatalf("%s never listened: %v", name, err)
		}
	}
}

// netnsOf is /proc/<pid>/ns/net of the sandbox's init, read from the host.
func netnsOf(t *testing.T, sb *Sandbox) string {
	t.Helper()
	ns, err := os.Readlink("/proc/" + strconv.Itoa(sb.cmd.Process.Pid) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func randomPort() int { return 20000 + rand.IntN(20000) }

// A sandbox that joins another's network namespace reaches its loopback
// server and serves there itself (ports from 1024 only: the namespace is
// not its user namespace's), cannot change the namespace, and a sandbox
// of its own namespace reaches neither server. Judged from the host: the
// namespaces of the inits, and the interfaces in them.
func TestJoinedNetnsSharesLoopback(t *testing.T) {
	port := randomPort()
	a, ns := startServer(t, "a", port, nil)

	code := fmt.Sprintf(`import errno, fcntl, socket, struct
def attempt(f):
    try:
        return f()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def fetch(port):
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    b = c.recv(64).decode()
    c.close()
    return b
def bind(port):
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen(1)
    return "bound"
def lo_down():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fcntl.ioctl(s, 0x8914, struct.pack("16sh22x", b"lo", 0))  # SIOCSIFFLAGS
    return "changed"
print(attempt(lambda: fetch(%d)), attempt(lambda: bind(%d)), attempt(lambda: bind(80)), attempt(lo_down))`, port, port+1)
	joined := Spec{Argv: python(code), LoopbackServers: true, NetNS: ns}
	exit, out, errOut := startAndWait(t, joined)
	got := strings.Fields(out)
	if exit.ExitCode != 0 || len(got) != 5 || got[0] != "from" || got[1] != "a" || got[2] != "bound" || got[3] != "EACCES" || got[4] == "changed" {
		t.Fatalf("joined sandbox: exit %+v out %q err %q (want: from a, bound, EACCES for port 80, lo unchanged)", exit, out, errOut)
	}

	// Still up: a's server answers the host.
	c, err := ns.DialPort(context.Background(), port)
	if err != nil {
		t.Fatalf("after the joined sandbox: %v", err)
	}
	c.Close()

	// A sandbox of its own namespace reaches nothing of a's.
	exit, out, errOut = startAndWait(t, Spec{Argv: python(code), LoopbackServers: true})
	if exit.ExitCode != 0 || !strings.HasPrefix(out, "ECONNREFUSED ") {
		t.Fatalf("a sandbox of its own namespace: exit %+v out %q err %q, want ECONNREFUSED", exit, out, errOut)
	}

	// From the host: a server joined to a's namespace is in it; one of its
	// own is not; neither is the host's; each sees lo only.
	b, _ := startServer(t, "b", port+2, ns)
	other, _ := startServer(t, "other", port, nil)
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	na, nb, no := netnsOf(t, a), netnsOf(t, b), netnsOf(t, other)
	if na != nb || na == no || na == host || no == host {
		t.Fatalf("namespaces: a %s, b (joined a's) %s, other %s, host %s", na, nb, no, host)
	}
	ino, err := ns.Inode()
	if err != nil || fmt.Sprintf("net:[%d]", ino) != na {
		t.Fatalf("NetNS.Inode %d %v, a's namespace %s", ino, err, na)
	}
	for _, sb := range []*Sandbox{a, b, other} {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(sb.cmd.Process.Pid) + "/net/dev")
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(lines) != 3 || !strings.HasPrefix(strings.TrimSpace(lines[2]), "lo:") {
			t.Errorf("interfaces of pid %d: %q, want lo only", sb.cmd.Process.Pid, raw)
		}
	}
}

// A held namespace outlives the sandbox that made it: a later sandbox
// joins it (lo still up); once closed, none can.
func TestJoinedNetnsOutlivesItsMaker(t *testing.T) {
	port := randomPort()
	sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := sb.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	sb.Kill(LimitNone)
	sb.Wait()
	sb.Channel().Close()
	if _, err := sb.NetNS(); !errors.Is(err, ErrEnded) {
		t.Errorf("NetNS of an ended sandbox: %v, want ErrEnded", err)
	}
	startServer(t, "later", port, ns)
	ns.Close()
	if sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/true"}, NetNS: ns}); err == nil {
		sb.Kill(LimitNone)
		sb.Wait()
		t.Fatal("a sandbox joined a closed namespace")
	}
}

// BenchmarkStartTrueOwnNetns and BenchmarkStartTrueJoinedNetns time a
// sandbox running /bin/true with a network namespace of its own (made,
// lo brought up) and joining a held one (setns of the starting thread,
// and back): the cost of a session's command before and after it shares
// the session's namespace.
func BenchmarkStartTrueOwnNetns(b *testing.B) { benchStartTrue(b, false) }

func BenchmarkStartTrueJoinedNetns(b *testing.B) { benchStartTrue(b, true) }

func benchStartTrue(b *testing.B, join bool) {
	var ns *NetNS
	if join {
		holder, err := Start(context.Background(), Spec{Argv: []string{"/bin/sleep", "600"}})
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			holder.Kill(LimitNone)
			holder.Wait()
			holder.Channel().Close()
		}()
		if ns, err = holder.NetNS(); err != nil {
			b.Fatal(err)
		}
		defer ns.Close()
	}
	for b.Loop() {
		sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/true"}, NetNS: ns})
		if err != nil {
			b.Fatal(err)
		}
		if e := sb.Wait(); e.ExitCode != 0 {
			b.Fatalf("exit %+v", e)
		}
		sb.Channel().Close()
	}
}
