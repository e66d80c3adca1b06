package service_test

// Containment tests: one test per row of docs/ATTACKS.md (row 12,
// the file API, is not covered here). Every snippet runs with the import
// policy OFF, so ctypes, os, socket and subprocess are all importable: the
// kernel jail alone must hold. A test fails, never skips, when containment
// breaks. Most snippets print "RESULT <key> <value>" lines (see pyPrelude)
// that the Go side checks.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// --- Between executions, Python level, protocol ----------------------------

func TestContainment_37_StateBetweenRuns(t *testing.T) {
	svc := newService(t)
	key := strconv.Itoa(0x0c0dec00 + int(time.Now().UnixNano()%0xff))
	planter := run(t, svc, pyPrelude+fill(`
IPC_CREAT = 0o1000
R("shmget", sc(29, @@KEY@@, 4096, IPC_CREAT | 0o600))
R("semget", sc(64, @@KEY@@, 1, IPC_CREAT | 0o600))
R("msgget", sc(68, @@KEY@@, IPC_CREAT | 0o600))
R("mq_open", sc(240, "codecage-plant", os.O_CREAT | os.O_RDWR, 0o600, 0))
for d in ("/dev/shm", "/tmp", "/workspace"):
    open(d + "/codecage-plant", "w").write("planted")
for d in ("/tmp", "/workspace"):
    for name in ("sitecustomize.py", "usercustomize.py", "codecage.pth"):
        with open(d + "/" + name, "w") as f:
            f.write('import sys; print("PWNED", file=sys.stderr); print("PWNED")\n')
R("planted", "yes")
`, "KEY", key))
	logResult(t, planter)
	mustSucceed(t, planter)
	pm := results(planter)
	expectAll(t, pm, []string{"shmget", "semget", "msgget", "planted"}, "OK", "yes")
	// POSIX message queues live on the ipc namespace's internal mqueue
	// mount, outside every Landlock rule: creating one is refused outright.
	expectOneOf(t, pm, "mq_open", "OK", "EACCES")

	res := run(t, svc, pyPrelude+fill(`
R("shmget", sc(29, @@KEY@@, 0, 0))
R("semget", sc(64, @@KEY@@, 0, 0))
R("msgget", sc(68, @@KEY@@, 0, 0))
R("mq_open", sc(240, "codecage-plant", os.O_RDONLY, 0, 0))
for d in ("/dev/shm", "/tmp", "/workspace"):
    R("ls_" + d, ",".join(sorted(os.listdir(d))) or "empty")
`, "KEY", key))
	logResult(t, res)
	mustSucceed(t, res)
	if strings.Contains(res.Stdout, "PWNED") || strings.Contains(res.Stderr, "PWNED") {
		t.Errorf("a file planted by an earlier run took effect:\nstdout=%q\nstderr=%q", res.Stdout, res.Stderr)
	}
	m := results(res)
	expectAll(t, m, []string{"shmget", "semget", "msgget"}, "ENOENT")
	expectOneOf(t, m, "mq_open", "ENOENT", "EACCES")
	expectAll(t, m, []string{"ls_/dev/shm", "ls_/tmp", "ls_/workspace"}, "empty")
}

func TestContainment_38_PythonLevelBypass(t *testing.T) {
	token := "codecage-canary-" + randomToken(t)
	canary := filepath.Join(t.TempDir(), "canary.txt")
	if err := os.WriteFile(canary, []byte(token), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := newPolicyService(t)
	// The import policy is ON (the default configuration: basic profile).
	res, err := svc.Execute(context.Background(), service.Request{Code: fill(`
def R(key, value):
    print("RESULT", key, value)
try:
    import os
    R("policy", "off")
except ImportError:
    R("policy", "on")
# A __subclasses__ walk reaches os without importing it.
g = None
for c in ().__class__.__base__.__subclasses__():
    if c.__name__ == "_wrap_close":
        g = c.__init__.__globals__
        break
R("reached", g["__name__"])
imp = g["__builtins__"]["__import__"]
os, ctypes, socket, errno = (imp(n, g) for n in ("os", "ctypes", "socket", "errno"))
# BuiltinImporter is another road to the same place.
bi = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == "BuiltinImporter"][0]
posix = bi.load_module("posix")
R("builtin_importer", "posix" if posix.getpid() > 0 else "none")
def attempt(fn):
    try:
        fn()
        return "OK"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def canary():
    print(open("@@CANARY@@").read())
def connect():
    s = socket.socket()
    s.settimeout(3)
    s.connect(("1.1.1.1", 443))
R("canary", attempt(canary))
R("canary_posix", attempt(lambda: posix.open("@@CANARY@@", posix.O_RDONLY)))
R("connect", attempt(connect))
R("proc1_environ", attempt(lambda: open("/proc/1/environ", "rb").read()))
libc = ctypes.CDLL(None, use_errno=True)
r = libc.unshare(0x10000000)
R("unshare_user", "OK" if r == 0 else errno.errorcode[ctypes.get_errno()])
`, "CANARY", canary), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	logResult(t, res)
	mustSucceed(t, res)
	if strings.Contains(res.Stdout, token) || strings.Contains(res.Stderr, token) {
		t.Fatalf("canary leaked after a Python-level bypass: %q", res.Stdout)
	}
	m := results(res)
	expectOneOf(t, m, "policy", "on")
	expectOneOf(t, m, "reached", "os")
	expectOneOf(t, m, "builtin_importer", "posix")
	expectAll(t, m, []string{"canary", "canary_posix"}, "ENOENT", "EACCES")
	expectOneOf(t, m, "connect", netDenied...)
	expectOneOf(t, m, "proc1_environ", either([]string{"EACCES", "EPERM"}, []string{"EACCES", "EPERM", "OK"})...) // see row 26
	expectOneOf(t, m, "unshare_user", "EPERM")
}

func TestContainment_39_StdinAndForgedFrames(t *testing.T) {
	svc := newService(t)
	const frame = `{"jsonrpc":"2.0","id":1,"result":{}}`
	res := run(t, svc, pyPrelude+`
import time
t0 = time.monotonic()
data = sys.stdin.read()
raw = os.read(0, 1024)
R("stdin", repr(data) + "," + repr(raw))
R("stdin_fast", time.monotonic() - t0 < 1)
print('{"jsonrpc":"2.0","id":1,"result":{}}')
_ = sys.stdout.write('Content-Length: 38\r\n\r\n{"jsonrpc":"2.0","id":1,"result":{}}')
`, withTimeout(10*time.Second))
	logResult(t, res)
	mustSucceed(t, res)
	m := results(res)
	expectOneOf(t, m, "stdin", `'',b''`)
	expectOneOf(t, m, "stdin_fast", "True")
	if !strings.Contains(res.Stdout, "\n"+frame+"\n") || !strings.Contains(res.Stdout, "\r\n\r\n"+frame) {
		t.Errorf("the forged frames are not verbatim in stdout: %q", res.Stdout)
	}
	if s := string(res.Result); s != "null" && s != "" {
		t.Errorf("the forged frame leaked into the result value: %s", s)
	}
	if strings.Contains(res.Stderr, "jsonrpc") {
		t.Errorf("the forged frame appeared in stderr: %q", res.Stderr)
	}
	// Encoded as a result, the frame is a string inside "stdout", nothing more.
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if _, ok := top["jsonrpc"]; ok {
		t.Error("the encoded result gained a jsonrpc member")
	}
}

func TestContainment_40_InterpreterCrash(t *testing.T) {
	svc := newService(t)
	t.Run("null_read", func(t *testing.T) {
		res := run(t, svc, "import ctypes\nctypes.string_at(0)\n", withTimeout(20*time.Second))
		logResult(t, res)
		if res.Error == nil || res.Error.Type != "Crash" || !strings.Contains(res.Error.Message, "signal 11") {
			t.Errorf("want a Crash by SIGSEGV, got error=%+v limit=%v", res.Error, res.Limit)
		}
	})
	t.Run("deep_c_recursion", func(t *testing.T) {
		start := time.Now()
		res := run(t, svc, `
import sys
sys.setrecursionlimit(10**7)
x = []
for i in range(10**6):
    x = [x]
repr(x)
`, withTimeout(60*time.Second))
		logResult(t, res)
		// It crashes in about a second; a loaded host may take many more.
		// Hanging is running into the limit.
		if time.Since(start) > 60*time.Second || res.TimedOut {
			t.Errorf("deep recursion hung: %v, timedOut=%v", time.Since(start), res.TimedOut)
		}
		if res.Error == nil || (res.Error.Type != "Crash" && res.Error.Type != "RecursionError") {
			t.Errorf("want a Crash or RecursionError, got error=%+v limit=%v", res.Error, res.Limit)
		}
	})
	expectResponsive(t, svc)
}

func TestContainment_41_RegexBacktracking(t *testing.T) {
	svc := newService(t)
	start := time.Now()
	res := run(t, svc, "import re\nre.match(r'(a+)+$', 'a'*40 + 'b')\n", withTimeout(2*time.Second))
	logResult(t, res)
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("run took %v with a 2 s timeout", d)
	}
	if !res.TimedOut || res.Limit == nil || *res.Limit != "timeout" {
		t.Errorf("want TimedOut, got timedOut=%v limit=%v error=%+v", res.TimedOut, res.Limit, res.Error)
	}
}

func TestContainment_NoLeftovers(t *testing.T) {
	// Counted before the service starts: its spare session mounts a
	// workspace while it boots.
	mounts := mountPoints(t)
	svc := newService(t)
	for i := 0; i < 200; i++ {
		res := run(t, svc, "print(1)")
		if out := mustSucceed(t, res); out != "1\n" {
			t.Fatalf("execution %d printed %q", i, out)
		}
	}
	assertNoLeftovers(t)
	if after := mountPoints(t); !slices.Equal(after, mounts) {
		t.Errorf("the host's mounts changed: %d -> %d in /proc/self/mountinfo; new: %q, gone: %q", len(mounts), len(after),
			mountsAdded(mounts, after), mountsAdded(after, mounts))
	}
}
