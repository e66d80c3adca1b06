package service_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/jail/seccomp"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
	"golang.org/x/sys/unix"
)

// execProbe tries every way of running a program that has no path the
// jail allows to execute: a memfd (unsealed, and sealed against exec)
// through /proc/self/fd/N and execveat(AT_EMPTY_PATH), and copies in /tmp,
// /dev/shm and the workspace. The program is a copy of python3 that creates
// pwned-<way> in the workspace: the host looks for those files, whatever
// the code reports. Each attempt runs in a child; R(way, errno or "RAN").
const execProbe = `
import os, sys, ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
ws = os.getcwd()
payload = open("/usr/bin/python3", "rb").read()
SYS_EXECVEAT, AT_EMPTY_PATH, MFD_CLOEXEC, MFD_NOEXEC_SEAL = 322, 0x1000, 1, 8

def argv(way):
    return ["python3", "-c", "open(%r, 'w').write('x')" % os.path.join(ws, "pwned-" + way)]

def attempt(way, make, use_execveat=False):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            fd, path = make()
            if use_execveat:
                a = [ctypes.c_char_p(x.encode()) for x in argv(way)] + [None]
                arr = (ctypes.c_char_p * len(a))(*a)
                env = (ctypes.c_char_p * 1)(None)
                libc.syscall(SYS_EXECVEAT, fd, b"", arr, env, AT_EMPTY_PATH)
                raise OSError(ctypes.get_errno(), "execveat")
            os.execv(path, argv(way))
        except OSError as e:
            os.write(w, errno.errorcode.get(e.errno, str(e.errno)).encode())
        except BaseException as e:
            os.write(w, type(e).__name__.encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    print("RESULT", way, out or "RAN", flush=True)

def memfd(flags):
    def make():
        fd = os.memfd_create("x", flags)
        os.write(fd, payload)
        try:
            os.fchmod(fd, 0o755)
        except OSError:
            pass
        return fd, "/proc/self/fd/%d" % fd
    return make

def copy(path):
    def make():
        with open(path, "wb") as f:
            f.write(payload)
        os.chmod(path, 0o755)
        return os.open(path, os.O_RDONLY), path
    return make

attempt("memfd", memfd(MFD_CLOEXEC))
attempt("memfd_execveat", memfd(MFD_CLOEXEC), True)
attempt("sealed_memfd", memfd(MFD_CLOEXEC | MFD_NOEXEC_SEAL))
attempt("sealed_memfd_execveat", memfd(MFD_CLOEXEC | MFD_NOEXEC_SEAL), True)
attempt("tmp", copy("/tmp/prog"))
attempt("tmp_execveat", copy("/tmp/prog2"), True)
attempt("devshm", copy("/dev/shm/prog"))
attempt("workspace", copy(os.path.join(ws, "prog")))
attempt("workspace_execveat", copy(os.path.join(ws, "prog2")), True)
`

// TestContainment_42_ExecWithoutPath: nothing runs a program the jail does
// not hold: not a memfd, not a copy in a writable place; in a session's
// code and in its allowed python3 command alike. Judged by the files the
// program would have made in the workspace, read from the host.
func TestContainment_42_ExecWithoutPath(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.EnableFilesystem = true
	cfg.StateDir = t.TempDir()
	cfg.PoolSize = 0
	svc := newServiceWith(t, cfg)
	id := newSession(t, svc, "alice")
	ways := []string{"memfd", "memfd_execveat", "sealed_memfd", "sealed_memfd_execveat", "tmp", "tmp_execveat",
		"devshm", "workspace", "workspace_execveat"}

	res, err := svc.Execute(context.Background(), service.Request{SessionID: id, Owner: "alice", Code: execProbe, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, res)
	fromCode := results(res)
	t.Logf("code: %v", fromCode)

	if err := os.WriteFile(filepath.Join(cfg.StateDir, "sessions", id, "probe.py"), []byte(execProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	cr, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: id, Owner: "alice", Command: "python3 probe.py", Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fromCmd := results(&service.Result{Stdout: cr.Stdout})
	t.Logf("command: %v (stderr %q)", fromCmd, cr.Stderr)

	// The host's view: the workspace holds no file the program made.
	ents, err := os.ReadDir(filepath.Join(cfg.StateDir, "sessions", id))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pwned-") {
			t.Errorf("a program without an allowed path ran: the workspace has %s", e.Name())
		}
	}
	// A one-shot run from the warm pool (a zygote's cell, natively): its
	// workspace is gone with it, so the verdicts are the code's, and the
	// program would have said "RAN".
	pooled := results(run(t, newService(t), execProbe, withTimeout(60*time.Second)))
	t.Logf("pooled run: %v", pooled)
	for i, m := range []map[string]string{fromCode, fromCmd, pooled} {
		for _, w := range ways {
			if i == 2 && machineRootMode() && (strings.HasPrefix(w, "tmp") || strings.HasPrefix(w, "workspace")) {
				// A machine runs what its own files hold (./run.sh, a
				// compiled program), from its workspace and /tmp; a memfd
				// and /dev/shm stay closed.
				expectOneOf(t, m, w, "RAN")
				continue
			}
			// The memfd ways fail where the memfd is made (EPERM: unsealed,
			// refused by seccomp; gVisor knows no sealing: EINVAL) or at the
			// exec (EACCES); the copies at the exec (noexec, Landlock).
			expectOneOf(t, m, w, "EPERM", "EACCES", "EINVAL", "ENOENT")
		}
	}
}

// TestContainment_43_NoInotifyOfSharedFiles: a watch inside a sandbox sees
// nothing of the host's or another tenant's use of the shared root. The host
// opens a file chosen at random under /usr while the sandbox watches; its
// name must not come out.
func TestContainment_43_NoInotifyOfSharedFiles(t *testing.T) {
	svc := newService(t)
	// A directory of the shared root with many files: the interpreter's
	// standard library is always there.
	dir := "/usr/lib/python3." + pythonMinor(t)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			files = append(files, e.Name())
		}
	}
	if len(files) == 0 {
		t.Fatalf("no files in %s to use", dir)
	}
	target := files[time.Now().UnixNano()%int64(len(files))]
	done := make(chan struct{})
	go func() {
		// The host (or another tenant) uses the file while the watch is up.
		defer close(done)
		for i := 0; i < 30; i++ {
			time.Sleep(100 * time.Millisecond)
			if b, err := os.ReadFile(filepath.Join(dir, target)); err == nil {
				_ = len(b)
			}
		}
	}()
	m := probe(t, svc, fill(`
import struct, select, time
fd = libc.inotify_init1(os.O_NONBLOCK)
R("inotify_init1", "OK" if fd >= 0 else ename(ctypes.get_errno()))
R("inotify_init", sc(253))
R("fanotify_init", sc(300, 0, 0))
seen = []
if fd >= 0:
    libc.inotify_add_watch(fd, b"@@DIR@@", 0xfff)
    end = time.time() + 3
    while time.time() < end:
        select.select([fd], [], [], 0.2)
        try:
            buf = os.read(fd, 65536)
        except BlockingIOError:
            continue
        while buf:
            wd, mask, cookie, n = struct.unpack_from("iIII", buf)
            seen.append(buf[16:16 + n].rstrip(b"\0").decode(errors="replace"))
            buf = buf[16 + n:]
R("seen", ",".join(sorted(set(seen))) or "-")
`, "DIR", dir), withTimeout(20*time.Second))
	<-done
	if strings.Contains(m["seen"], target) {
		t.Errorf("the sandbox saw the host open %s/%s through inotify: %q", dir, target, m["seen"])
	}
	// Off the allow-list on both backends (gVisor's own inotify would see
	// only the sandbox anyway).
	expectOneOf(t, m, "inotify_init1", "ENOSYS")
	expectOneOf(t, m, "inotify_init", "ENOSYS")
	expectOneOf(t, m, "fanotify_init", "EPERM")
}

// TestContainment_44_SyscallCensus calls every syscall number from inside
// a sandbox (each in a child of its own, with zero arguments, killed once
// it blocks: asleep, not merely slow to run) and compares what got past the filter with the reviewed list in
// internal/jail/seccomp: a number on no list must fail with ENOSYS, a
// denied one with EPERM, and an allowed one must reach the kernel (under
// gVisor, its kernel may lack it). Nothing widens silently.
func TestContainment_44_SyscallCensus(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, pyPrelude+`
import select, signal
out = []
for nr in range(0, 512):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            ctypes.set_errno(0)
            v = libc.syscall(ctypes.c_long(nr), 0, 0, 0, 0, 0, 0)
            os.write(w, str(ctypes.get_errno() if v == -1 else 0).encode())
        finally:
            os._exit(0)
    os.close(w)
    p = select.poll()
    p.register(r, select.POLLIN)
    # Wait while the child may still get to its call (runnable, or in a
    # page fault: a loaded host, a PVM guest); a child asleep has blocked
    # in the call, one gone without a word was killed by it: "-".
    data = ""
    for _ in range(120):
        if p.poll(250):
            data = os.read(r, 16).decode()
            break
        try:
            state = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0]
        except OSError:
            state = "?"
        if state not in ("R", "D"):
            # It may have written and exited since the poll above.
            if p.poll(0):
                data = os.read(r, 16).decode()
            break
    os.close(r)
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    os.waitpid(pid, 0)
    out.append("%d:%s" % (nr, data or "-"))
print("CENSUS", " ".join(out))
`, withTimeout(120*time.Second))
	mustSucceed(t, res)
	line := ""
	for _, l := range strings.Split(res.Stdout, "\n") {
		if rest, ok := strings.CutPrefix(l, "CENSUS "); ok {
			line = rest
		}
	}
	got := map[int]string{}
	for _, f := range strings.Fields(line) {
		nr, errno, _ := strings.Cut(f, ":")
		n, _ := strconv.Atoi(nr)
		got[n] = errno
	}
	if len(got) != 512 {
		t.Fatalf("census covered %d numbers, want 512: %q", len(got), res.Stdout)
	}
	enosys, eperm := strconv.Itoa(int(unix.ENOSYS)), strconv.Itoa(int(unix.EPERM))
	verdicts := syscallVerdicts(t)
	// The kernel runs uretprobe and uprobe without consulting seccomp (the
	// probe trampolines the host installs call them, 6.11+): called from
	// anywhere else, uretprobe kills the caller (SIGSEGV) and uprobe fails
	// with ENXIO. They are checked for exactly that, not for a verdict.
	exempt := map[int][]string{unix.SYS_URETPROBE: {"-", enosys}, unix.SYS_UPROBE: {strconv.Itoa(int(unix.ENXIO)), enosys}}
	reached := 0
	for nr := 0; nr < 512; nr++ {
		v, e := verdicts[nr], got[nr]
		if want, ok := exempt[nr]; ok && !onGVisor() {
			if !slices.Contains(want, e) {
				t.Errorf("syscall %d (a probe trampoline's) answered %q, want one of %q", nr, e, want)
			}
			continue
		}
		switch {
		case v == "":
			if e != enosys {
				t.Errorf("syscall %d is on no list, but it answered %q, not ENOSYS: it reached the kernel", nr, e)
			}
		case v == "deny" && onGVisor():
			// A runsc that lacks the name skips its rule, and the default
			// refuses the call with ENOSYS: refused either way.
			if e != eperm && e != enosys {
				t.Errorf("syscall %d is denied, but under gVisor it answered %q", nr, e)
			}
		case v == "deny":
			if e != eperm {
				t.Errorf("syscall %d is denied, but it answered %q, not EPERM", nr, e)
			}
		case v == "allow" && e != enosys:
			reached++
		case v == "allow" && !onGVisor(): // gVisor's kernel lacks some
			t.Errorf("syscall %d is allowed, but it answered ENOSYS (the filter refused it?)", nr)
		}
	}
	t.Logf("%d syscalls reached the kernel", reached)
}

// syscallVerdicts is the jail's reviewed lists by number: "allow",
// "deny", or "" for a number on no list. The syscalls with argument rules
// get the verdict their rule gives zero arguments: clone (a plain fork),
// ioctl and personality(PER_LINUX) pass; socket and socketpair of family 0
// and memfd_create without MFD_NOEXEC_SEAL are refused with EPERM.
func syscallVerdicts(t *testing.T) map[int]string {
	t.Helper()
	allowed, denied := seccomp.Lists()
	if len(allowed) == 0 {
		t.Fatal("no seccomp allow-list on this platform")
	}
	out := map[int]string{}
	for _, nr := range allowed {
		out[nr] = "allow"
	}
	for _, nr := range denied {
		out[nr] = "deny"
	}
	for _, nr := range []int{unix.SYS_CLONE, unix.SYS_IOCTL, unix.SYS_PERSONALITY} {
		out[nr] = "allow"
	}
	for _, nr := range []int{unix.SYS_SOCKET, unix.SYS_SOCKETPAIR, unix.SYS_MEMFD_CREATE} {
		out[nr] = "deny"
	}
	return out
}

// TestContainment_45_ProcShowsOnlyTheSandbox: /proc holds the sandbox's
// processes and nothing host-wide (mounted with subset=pid).
func TestContainment_45_ProcShowsOnlyTheSandbox(t *testing.T) {
	svc := newService(t)
	m := probe(t, svc, `
def size(p):
    with open(p, "rb") as f:
        R(p[6:].replace("/", "_") + "_bytes", len(f.read()))
for f in ["cmdline", "stat", "meminfo", "cpuinfo", "diskstats", "pressure/cpu", "pressure/io", "sys/kernel/hostname",
          "kallsyms", "sysrq-trigger", "mounts", "net/dev", "uptime", "loadavg", "version"]:
    R(f.replace("/", "_"), attempt(lambda: size("/proc/" + f)))
try:
    R("memtotal_kib", [l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal:")][0])
except OSError:
    pass
R("self_status", attempt(lambda: open("/proc/self/status").read()))
R("entries", ",".join(sorted(e for e in os.listdir("/proc") if not e.isdigit())))
`)
	if onGVisor() {
		// gVisor's /proc is its own kernel's: nothing of the host's is there.
		expectOneOf(t, m, "self_status", "OK")
		return
	}
	if machineRootMode() {
		machineProcIsTheMachines(t, m, svc.Config().MaxMemory)
		return
	}
	expectAll(t, m, []string{"cmdline", "stat", "meminfo", "cpuinfo", "diskstats", "pressure_cpu", "pressure_io",
		"sys_kernel_hostname", "kallsyms", "sysrq-trigger", "mounts", "net_dev", "uptime", "loadavg", "version"}, "ENOENT")
	expectOneOf(t, m, "self_status", "OK")
	expectOneOf(t, m, "entries", "self,thread-self")
}

// machineProcIsTheMachines is row 45 for a machine, whose /proc is full
// for ps, top and free: each host-wide entry is the machine's own figure
// (memory, CPU, uptime, load, rendered from its cgroup) or covered by an
// empty file or directory; the rest are the machine's own namespaces'.
func machineProcIsTheMachines(t *testing.T, m map[string]string, maxMemory int64) {
	t.Helper()
	expectAll(t, m, []string{"cmdline_bytes", "cpuinfo_bytes", "diskstats_bytes", "kallsyms_bytes", "version_bytes"}, "0")
	// This kernel may lack the entry; where it has it, it is covered.
	if m["sysrq-trigger"] != "ENOENT" {
		expectOneOf(t, m, "sysrq-trigger_bytes", "0")
	}
	expectAll(t, m, []string{"pressure_cpu", "pressure_io", "sys_kernel_hostname"}, "ENOENT")
	expectAll(t, m, []string{"stat", "meminfo", "uptime", "loadavg", "mounts", "net_dev", "self_status"}, "OK")
	host, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	total, _ := strconv.ParseInt(m["memtotal_kib"], 10, 64)
	if limit := maxMemory >> 10; total <= 0 || total > limit || strings.Contains(string(host), " "+m["memtotal_kib"]+" kB\nMemFree") {
		t.Errorf("the machine's MemTotal is %q kB: want its own memory (at most %d kB), not the host's", m["memtotal_kib"], limit)
	}
}

// pythonMinor is the minor version of /usr/bin/python3, which the sandboxes
// run (its standard library is in /usr/lib/python3.<minor>).
func pythonMinor(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("/usr/bin/python3", "-I", "-c", "import sys; print(sys.version_info[1])").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
