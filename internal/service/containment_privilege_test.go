package service_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/service"
)

// TestContainment_31_ForeignSyscallABIs makes foreign-ABI calls whose effect
// the host sees: exit_group(42) by the i386 ABI (int 0x80) and the x32
// one. Had either reached a kernel syscall handler, the interpreter would
// have exited with status 42; the supervisor's wait status says what
// happened. Seccomp kills the process by SIGSYS. On some machines (PVM
// guests, kernels without IA32 emulation) and under gVisor, int 0x80 from
// a 64-bit process faults (SIGSEGV) before any handler sees it: that too
// keeps the call from the kernel, so it passes; a return or an exit does
// not. A native call by
// the same trampoline first shows that the machine code runs at all.
func TestContainment_31_ForeignSyscallABIs(t *testing.T) {
	svc := newService(t)
	check := func(t *testing.T, res *service.Result, signals ...string) {
		t.Helper()
		m := results(res)
		expectOneOf(t, m, "before", "yes")
		if res.Error != nil && res.Error.Type == "Exit" {
			t.Fatalf("the foreign exit_group(42) reached a kernel: %+v", res.Error)
		}
		if after, ok := m["after"]; ok && onGVisor() {
			// gVisor implements the x86_64 ABI alone: a foreign call fails
			// in its kernel (or faults, below) and reaches no host syscall
			// table.
			if n, err := strconv.Atoi(after); err != nil || n >= 0 {
				t.Errorf("gVisor: the foreign syscall returned %q, want a failure", after)
			}
			return
		} else if ok {
			t.Errorf("the foreign syscall returned (%s) instead of killing the process", after)
		}
		if res.Error == nil || res.Error.Type != "Crash" || !slices.ContainsFunc(signals, func(s string) bool {
			return strings.Contains(res.Error.Message, "("+s+")")
		}) {
			t.Errorf("want a Crash by %v, got error=%+v limit=%v stderr=%q", signals, res.Error, res.Limit, res.Stderr)
		}
	}
	trampoline := pyPrelude + `
import mmap
pages = []  # the mappings must outlive the calls
def machine(code):
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(bytes(code))
    pages.append(m)
    return ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
`
	t.Run("int80", func(t *testing.T) {
		res := run(t, svc, trampoline+`
R("native", machine([0xb8, 39, 0, 0, 0,  # mov eax, 39 (x86_64 getpid)
                     0x0f, 0x05,          # syscall
                     0xc3])())            # ret
R("before", "yes")
R("after", machine([0xb8, 252, 0, 0, 0,   # mov eax, 252 (i386 exit_group)
                    0xbb, 42, 0, 0, 0,    # mov ebx, 42
                    0xcd, 0x80,           # int 0x80
                    0xc3])())             # ret
`)
		logResult(t, res)
		if pid, err := strconv.Atoi(results(res)["native"]); err != nil || pid <= 0 {
			t.Fatalf("the native trampoline returned %q, want a pid: the test proves nothing", results(res)["native"])
		}
		check(t, res, "bad system call", "segmentation fault")
	})
	t.Run("x32", func(t *testing.T) {
		res := run(t, svc, pyPrelude+`
R("before", "yes")
R("after", libc.syscall(ctypes.c_long(0x40000000 | 231), 42))  # x32 exit_group(42)
`)
		logResult(t, res)
		check(t, res, "bad system call")
	})
	expectResponsive(t, svc)
}

func TestContainment_32_TerminalIoctls(t *testing.T) {
	svc := newService(t)
	m := probe(t, svc, `
import fcntl, termios
c = ctypes.c_char(b"x")
R("tiocsti_fd0", sc(16, 0, 0x5412, ctypes.byref(c)))
R("tiocsti_fd1", sc(16, 1, 0x5412, ctypes.byref(c)))
R("tiocsti_high_bits", sc(16, 0, ctypes.c_ulong(0xffffffff00005412), ctypes.byref(c)))
R("tioclinux", sc(16, 0, 0x541C, ctypes.byref(c)))
R("tioclinux_high_bits", sc(16, 0, ctypes.c_ulong(0xffffffff0000541C), ctypes.byref(c)))
R("fcntl_tiocsti", attempt(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x")))
R("dev_tty", attempt(lambda: open("/dev/tty", "rb")))
`)
	expectAll(t, m, []string{"tiocsti_fd0", "tiocsti_fd1", "tiocsti_high_bits", "tioclinux", "tioclinux_high_bits",
		"fcntl_tiocsti"}, "EPERM")
	// gVisor has a /dev/tty, which without a controlling terminal fails;
	// so has a machine, for the programs of a computer.
	tty := either([]string{"ENOENT"}, []string{"ENOENT", "EIO", "ENXIO"})
	if machineRootMode() {
		tty = []string{"ENXIO"}
	}
	expectOneOf(t, m, "dev_tty", tty...)
}

func TestContainment_33_SetuidBinaries(t *testing.T) {
	setuid := 0
	for _, p := range []string{"/usr/bin/su", "/usr/bin/mount"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSetuid != 0 {
			setuid++
		}
	}
	if setuid == 0 {
		t.Fatal("neither /usr/bin/su nor /usr/bin/mount is setuid on this host: the test would prove nothing")
	}
	svc := newService(t)
	m := probe(t, svc, `
import subprocess, time
R("euid_self", os.geteuid())
R("nosuid_usr", bool(os.statvfs("/usr").f_flag & os.ST_NOSUID))
r = subprocess.run(["/usr/bin/mount", "-t", "tmpfs", "x", "/tmp"], stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
R("mount_rc", r.returncode)
# Start each setuid binary and read the credentials it runs with once the
# exec is done (a zombie keeps them, so a quick exit does not hide them).
for path in ("/usr/bin/su", "/usr/bin/mount", "/usr/bin/passwd", "/usr/bin/chfn",
             "/usr/lib/polkit-1/polkit-agent-helper-1"):
    name = os.path.basename(path)[:15]
    p = subprocess.Popen([path, "root"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    euids = "not-observed"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            status = dict(l.split(":", 1) for l in open("/proc/%d/status" % p.pid) if ":" in l)
        except OSError:
            break
        if status["Name"].strip() == name:
            euids = ",".join(status["Uid"].split())
            break
        time.sleep(0.001)
    p.kill()
    p.wait()
    R("uids_" + os.path.basename(path), euids)
`)
	// Under gVisor the code runs as its host uid inside too, and gVisor's
	// statfs reports no mount flags; the set-user-ID bits are ignored all
	// the same, as the uids below show.
	self := either([]string{"1000"}, []string{m["euid_self"]})[0]
	if machineRootMode() {
		// Root inside a machine is 0 already: a set-user-ID program
		// cannot take it further (the mount below still fails, and row
		// 52 judges its host uid).
		self = "0"
	} else if self == "0" || self == "" {
		t.Fatalf("euid_self = %q", self)
	}
	expectOneOf(t, m, "euid_self", self)
	if !onGVisor() {
		expectOneOf(t, m, "nosuid_usr", "True")
	}
	if m["mount_rc"] == "0" || m["mount_rc"] == "" {
		t.Errorf("mount -t tmpfs inside the sandbox: exit status %q, want a failure", m["mount_rc"])
	}
	expectAll(t, m, []string{"uids_su", "uids_mount", "uids_passwd", "uids_chfn", "uids_polkit-agent-helper-1"},
		strings.Repeat(self+",", 3)+self)
}

func TestContainment_34_Privileges(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, pyPrelude+`
import subprocess
def show(prefix, text):
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k in ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
            R(prefix + k, ",".join(v.split()))
show("self_", open("/proc/self/status").read())
show("child_", subprocess.run(["/bin/cat", "/proc/self/status"], capture_output=True, text=True).stdout)
`)
	logResult(t, res)
	mustSucceed(t, res)
	m := results(res)
	for _, who := range []string{"self_", "child_"} {
		caps := []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
		if onGVisor() {
			caps = caps[:4] // gVisor's status has no CapAmb nor NoNewPrivs line
		} else {
			expectOneOf(t, m, who+"NoNewPrivs", "1")
		}
		if machineRootMode() {
			// Root inside holds its machine's capabilities, in its own
			// user namespace only, and passes none on beyond it (no
			// inheritable or ambient ones); row 52 judges them from the host.
			expectOneOf(t, m, who+"CapInh", "0000000000000000")
			expectOneOf(t, m, who+"CapAmb", "0000000000000000")
			for _, k := range []string{"CapPrm", "CapEff", "CapBnd"} {
				expectOneOf(t, m, who+k, fmt.Sprintf("%016x", jail.RootInsideCapabilities()))
			}
			expectOneOf(t, m, who+"Seccomp", "2")
			expectAll(t, m, []string{who + "Uid", who + "Gid"}, "0,0,0,0")
			continue
		}
		for _, k := range caps {
			expectOneOf(t, m, who+k, "0000000000000000")
		}
		expectOneOf(t, m, who+"Seccomp", "2")
		for _, k := range []string{"Uid", "Gid"} {
			ids := strings.Split(m[who+k], ",")
			if len(ids) != 4 {
				t.Errorf("%s%s = %q", who, k, m[who+k])
			}
			for _, id := range ids {
				if id == "0" {
					t.Errorf("%s%s = %q: runs as root", who, k, m[who+k])
				}
			}
		}
	}
}

func TestContainment_35_KernelFiles(t *testing.T) {
	svc := newService(t)
	m := probe(t, svc, `
import stat
for p, flags in (("/proc/sys/kernel/core_pattern", os.O_WRONLY), ("/proc/sysrq-trigger", os.O_WRONLY),
                 ("/proc/sys/kernel/modprobe", os.O_WRONLY), ("/proc/kcore", os.O_RDONLY),
                 ("/sys/kernel/uevent_helper", os.O_WRONLY), ("/sys/fs/cgroup", os.O_RDONLY),
                 ("/dev/mem", os.O_RDONLY), ("/dev/kmem", os.O_RDONLY), ("/dev/port", os.O_RDONLY),
                 ("/dev/kmsg", os.O_RDONLY), ("/dev/sda", os.O_RDONLY), ("/dev/vda", os.O_RDONLY),
                 ("/dev/nvme0n1", os.O_RDONLY), ("/dev/kvm", os.O_RDWR)):
    R("open_" + p, attempt(lambda: os.close(os.open(p, flags))))
R("listdir_/sys", attempt(lambda: os.listdir("/sys")))
R("sys_entries", len(os.listdir("/sys")) if os.access("/sys", os.R_OK) else 0)
R("mknod_block", attempt(lambda: os.mknod("/tmp/vda", stat.S_IFBLK | 0o600, os.makedev(254, 0))))
R("mknod_char", attempt(lambda: os.mknod("/tmp/mem", stat.S_IFCHR | 0o600, os.makedev(1, 1))))
`)
	var keys []string
	for _, p := range []string{"/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/proc/sys/kernel/modprobe",
		"/proc/kcore", "/sys/kernel/uevent_helper", "/sys/fs/cgroup", "/dev/mem", "/dev/kmem", "/dev/port",
		"/dev/kmsg", "/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/kvm"} {
		keys = append(keys, "open_"+p)
	}
	if onGVisor() && machineRootMode() {
		// Root of gVisor's kernel passes the modes of its own files: its
		// /sys is the bundle's empty tmpfs, its sysrq-trigger a file of
		// its own that does nothing; neither is the host's.
		expectOneOf(t, m, "sys_entries", "0")
		expectOneOf(t, m, "open_/proc/sysrq-trigger", "ENOENT", "EACCES", "OK")
		keys = slices.DeleteFunc(keys, func(k string) bool { return k == "open_/proc/sysrq-trigger" })
		expectAll(t, m, keys, "ENOENT", "EACCES")
	} else {
		expectAll(t, m, append(keys, "listdir_/sys"), "ENOENT", "EACCES")
	}
	expectAll(t, m, []string{"mknod_block", "mknod_char"}, "EPERM", "EACCES")
}

func TestContainment_36_HostnameAndClock(t *testing.T) {
	hostBefore, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	svc := newService(t)
	m := probe(t, svc, `
class timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
ts = timespec()
libc.clock_gettime(0, ctypes.byref(ts))  # set the clock to now: harmless should it ever pass
R("sethostname", sc(170, "pwned", 5))
R("setdomainname", sc(171, "pwned", 5))
R("clock_settime", sc(227, 0, ctypes.byref(ts)))
tv = timespec(ts.sec, ts.nsec // 1000)  # struct timeval has the same layout
R("settimeofday", sc(164, ctypes.byref(tv), 0))
R("libc_sethostname", "OK" if libc.sethostname(b"pwned", 5) == 0 else ename(ctypes.get_errno()))
R("hostname", os.uname().nodename)
`)
	expectAll(t, m, []string{"sethostname", "setdomainname", "clock_settime", "settimeofday", "libc_sethostname"}, "EPERM")
	expectOneOf(t, m, "hostname", "sandbox")
	if hostAfter, _ := os.Hostname(); hostAfter != hostBefore {
		t.Errorf("host hostname changed: %q -> %q", hostBefore, hostAfter)
	}
}
