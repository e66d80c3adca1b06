package seccomp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ---- Real kernel test, run in a re-executed child ----

// childEnv selects a child mode in TestMain. The parent test process never
// installs a filter itself: seccomp filters cannot be removed.
const childEnv = "CODECAGE_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

// runChildProcess re-executes the test binary in the given child mode.
func runChildProcess(t *testing.T, mode string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestInstallEnforces(t *testing.T) {
	out, err := runChildProcess(t, "enforce")
	t.Logf("child output:\n%s", out)
	if err != nil {
		t.Fatalf("child failed: %v", err)
	}
	passed := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "ok "); ok {
			passed[name] = true
		}
	}
	if !strings.Contains(out, "\nDONE\n") && !strings.HasPrefix(out, "DONE\n") {
		t.Error("child did not finish its checks")
	}
	for _, c := range liveChecks() {
		if !passed[c.name] {
			t.Errorf("check %q did not pass in the child", c.name)
		}
	}
	for _, name := range []string{"Install without no_new_privs fails", "Install", "unshare on pre-existing thread (TSYNC)"} {
		if !passed[name] {
			t.Errorf("check %q did not pass in the child", name)
		}
	}
}

// runChild is the body of a re-executed child; it returns the exit code.
func runChild(mode string) int {
	switch mode {
	case "enforce":
		return childEnforce()
	case "x32":
		return childX32()
	case "inherited":
		// Run after execve under the parent's filter.
		if err := checkStatus(); err != nil {
			fmt.Println("FAIL", err)
			return 1
		}
		if err := unix.Unshare(unix.CLONE_NEWUSER); !errors.Is(err, unix.EPERM) {
			fmt.Printf("FAIL unshare after exec: got %v, want EPERM\n", err)
			return 1
		}
		return 0
	}
	fmt.Println("unknown child mode", mode)
	return 2
}

// lockAndSetNNP pins the goroutine and sets no_new_privs on its thread, as a
// real caller of Install must.
func lockAndSetNNP() error {
	runtime.LockOSThread()
	return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}

func childX32() int {
	// Avoid leaving a core file behind when SIGSYS kills us.
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	if err := lockAndSetNNP(); err != nil {
		fmt.Println("prctl:", err)
		return 1
	}
	prog, err := Build(Options{})
	if err == nil {
		err = Install(prog)
	}
	if err != nil {
		fmt.Println("install:", err)
		return 1
	}
	fmt.Println("installed")
	_, _, e := unix.RawSyscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
	fmt.Println("x32 getpid was not killed, errno", e)
	return 1
}

func childEnforce() int {
	failed := false
	report := func(name string, err error) {
		if err != nil {
			failed = true
			fmt.Printf("FAIL %s: %v\n", name, err)
			return
		}
		fmt.Printf("ok %s\n", name)
	}

	runtime.LockOSThread()
	prog, err := Build(Options{})
	if err != nil {
		fmt.Println("FAIL Build:", err)
		return 1
	}
	if err := Install(prog); err == nil {
		report("Install without no_new_privs fails", errors.New("Install succeeded without no_new_privs"))
	} else {
		report("Install without no_new_privs fails", nil)
	}

	// A thread that exists before Install, to prove TSYNC reaches it. It
	// is locked, so it cannot be the main goroutine's (also locked) thread.
	ready, start, result := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		runtime.LockOSThread()
		close(ready)
		<-start
		result <- unix.Unshare(unix.CLONE_NEWUSER)
	}()
	<-ready

	if err := lockAndSetNNP(); err != nil {
		fmt.Println("FAIL prctl(PR_SET_NO_NEW_PRIVS):", err)
		return 1
	}
	if err := Install(prog); err != nil {
		fmt.Println("FAIL Install:", err)
		return 1
	}
	report("Install", nil)

	close(start)
	report("unshare on pre-existing thread (TSYNC)", wantErrno(<-result, unix.EPERM))

	for _, c := range liveChecks() {
		report(c.name, c.run())
	}
	fmt.Println("DONE")
	if failed {
		return 1
	}
	return 0
}

// liveCheck is one assertion made inside the filtered child. Each probe is
// chosen so that, should the filter not block it, the kernel fails it with
// a different error (or succeeds harmlessly), never with the expected one.
type liveCheck struct {
	name string
	run  func() error
}

func wantErrno(err error, want unix.Errno) error {
	if errors.Is(err, want) {
		return nil
	}
	return fmt.Errorf("got %v, want %v", err, want)
}

// rawErr turns a raw syscall errno into an error (nil on success).
func rawErr(e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

// socketErr creates and closes a socket, returning only the error.
func socketErr(domain, typ, proto int) error {
	fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func checkStatus() error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for _, want := range []string{"\nSeccomp:\t2\n", "\nNoNewPrivs:\t1\n"} {
		if !bytes.Contains(status, []byte(want)) {
			return fmt.Errorf("/proc/self/status lacks %q", strings.TrimSpace(want))
		}
	}
	return nil
}

func liveChecks() []liveCheck {
	var b byte
	bp := uintptr(unsafe.Pointer(&b))
	return []liveCheck{
		{"status shows filter mode and no_new_privs", checkStatus},
		{"unshare(CLONE_NEWUSER) EPERM", func() error {
			return wantErrno(unix.Unshare(unix.CLONE_NEWUSER), unix.EPERM)
		}},
		{"unshare(CLONE_NEWNS) EPERM", func() error {
			return wantErrno(unix.Unshare(unix.CLONE_NEWNS), unix.EPERM)
		}},
		{"setns(-1) EPERM", func() error { return wantErrno(unix.Setns(-1, 0), unix.EPERM) }},
		{"clone(CLONE_NEWUSER|CLONE_FS) EPERM", func() error {
			// Unfiltered, the kernel rejects this combination with EINVAL
			// before forking, so no stray child can appear.
			_, _, e := unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS, 0, 0, 0, 0, 0)
			return wantErrno(rawErr(e), unix.EPERM)
		}},
		{"memfd_create without MFD_NOEXEC_SEAL EPERM", func() error {
			_, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC)
			return wantErrno(err, unix.EPERM)
		}},
		{"memfd_create with MFD_NOEXEC_SEAL allowed, and its exec fails", func() error {
			fd, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC|0x8)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			if err := unix.Fchmod(fd, 0o755); err == nil {
				return errors.New("fchmod +x of a sealed memfd succeeded")
			}
			return nil
		}},
		{"inotify_init1 ENOSYS", func() error {
			_, err := unix.InotifyInit1(unix.IN_CLOEXEC)
			return wantErrno(err, unix.ENOSYS)
		}},
		{"clone3 ENOSYS", func() error {
			_, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
			return wantErrno(rawErr(e), unix.ENOSYS)
		}},
		{"socket(AF_VSOCK) EPERM", func() error {
			return wantErrno(socketErr(unix.AF_VSOCK, unix.SOCK_STREAM, 0), unix.EPERM)
		}},
		{"socket(AF_ALG) EPERM", func() error {
			return wantErrno(socketErr(unix.AF_ALG, unix.SOCK_SEQPACKET, 0), unix.EPERM)
		}},
		{"socket(AF_PACKET) EPERM", func() error {
			return wantErrno(socketErr(unix.AF_PACKET, unix.SOCK_RAW, 0), unix.EPERM)
		}},
		{"socket(AF_NETLINK) EAFNOSUPPORT", func() error {
			return wantErrno(socketErr(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE), unix.EAFNOSUPPORT)
		}},
		{"socketpair(AF_NETLINK) EAFNOSUPPORT", func() error {
			_, err := unix.Socketpair(unix.AF_NETLINK, unix.SOCK_RAW, 0)
			return wantErrno(err, unix.EAFNOSUPPORT)
		}},
		{"socket(AF_INET) allowed", func() error { return socketErr(unix.AF_INET, unix.SOCK_DGRAM, 0) }},
		{"socket(AF_UNIX) allowed", func() error { return socketErr(unix.AF_UNIX, unix.SOCK_STREAM, 0) }},
		{"socketpair(AF_UNIX) allowed", func() error {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				unix.Close(fds[0])
				unix.Close(fds[1])
			}
			return err
		}},
		{"ioctl(0, 0xffffffff00005412) EPERM", func() error {
			_, _, e := unix.Syscall(unix.SYS_IOCTL, 0, 0xffffffff00005412, bp)
			return wantErrno(rawErr(e), unix.EPERM)
		}},
		{"ioctl(0, TIOCSTI) EPERM", func() error {
			_, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, bp)
			return wantErrno(rawErr(e), unix.EPERM)
		}},
		{"ioctl(/dev/null, TCGETS) reaches the kernel", func() error {
			f, err := os.Open(os.DevNull)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
			return wantErrno(err, unix.ENOTTY)
		}},
		{"mount EPERM", func() error {
			// Unfiltered, the missing target yields ENOENT.
			return wantErrno(unix.Mount("none", "/nonexistent-codecage-seccomp-test", "tmpfs", 0, ""), unix.EPERM)
		}},
		{"ptrace EPERM", func() error {
			// Unfiltered: ESRCH, we are not tracing ourselves.
			_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_CONT, uintptr(os.Getpid()), 0, 0, 0, 0)
			return wantErrno(rawErr(e), unix.EPERM)
		}},
		{"io_uring_setup EPERM", func() error {
			_, _, e := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 0, 0, 0)
			return wantErrno(rawErr(e), unix.EPERM)
		}},
		{"personality(ADDR_NO_RANDOMIZE) EPERM", func() error {
			_, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, 0x0040000, 0, 0) // ADDR_NO_RANDOMIZE
			return wantErrno(rawErr(e), unix.EPERM)
		}},
		{"personality(0xffffffff) allowed", func() error {
			_, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0)
			return rawErr(e)
		}},
		{"getpid works", func() error {
			pid, _, e := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
			if e != 0 || int(pid) != os.Getpid() {
				return fmt.Errorf("getpid = %d, %v; want %d", pid, e, os.Getpid())
			}
			return nil
		}},
		{"fork+exec works and the filter is inherited", func() error {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=inherited")
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}},
	}
}
