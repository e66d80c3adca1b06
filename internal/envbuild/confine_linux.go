package envbuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/fdpass"
	"github.com/codecage/codecage/internal/loopback"
	"github.com/codecage/codecage/internal/reexec"
)

// A build tool runs under a helper, this very binary re-executed as PID 1
// of new network, mount, PID, IPC and UTS namespaces. Its network
// namespace has only lo; when the build names an index, the helper
// listens on 127.0.0.1:proxyPort there and hands that listening socket to
// the supervisor, which serves it with the egress proxy allowing only the
// index's host. Every mount the tool makes (mmdebstrap's /proc and /dev in
// the target, buildah's) stays in its namespace, and killing the helper
// ends every process of the build.
const (
	confineArg = "codecage-envbuild-confine"
	// proxyPort is the proxy's port on the build's loopback.
	proxyPort = 3128
	// fdHandoff is the helper's socket to the supervisor.
	fdHandoff = 3
	// handoffTimeout bounds the wait for the helper's listening socket.
	handoffTimeout = 10 * time.Second
)

func init() { reexec.Register(confineArg, runConfineHelper) }

// proxyURL is what a confined tool's http_proxy says.
var proxyURL = fmt.Sprintf("http://127.0.0.1:%d", proxyPort)

// confined is one command run under the helper.
type confined struct {
	argv []string
	env  []string
	dir  string
	// allow is the only way out (nil: none at all).
	allow *egress.Policy
	log   io.Writer
	label string
}

// run runs c.argv confined, streaming its output to c.log, and returns
// when it and every process it started have ended.
func (c confined) run(ctx context.Context) error {
	if len(c.argv) == 0 {
		return errors.New("envbuild: no command")
	}
	path, err := exec.LookPath(c.argv[0])
	if err != nil {
		return fmt.Errorf("envbuild: %s is not installed (apt-get install %s): %w", c.argv[0], c.argv[0], err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("envbuild: this binary: %w", err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("envbuild: %w", err)
	}
	ours := os.NewFile(uintptr(pair[0]), "handoff")
	theirs := os.NewFile(uintptr(pair[1]), "handoff")
	defer ours.Close()

	mode := "closed"
	if c.allow != nil {
		mode = "proxy"
	}
	cmd := exec.Command(exe, append([]string{confineArg, mode, path}, c.argv[1:]...)...)
	cmd.Env = c.env
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = c.log, c.log
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWNET | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		Pdeathsig:  syscall.SIGKILL,
	}

	// The goroutine that starts the helper keeps its thread until the
	// helper is reaped: Pdeathsig fires when that thread ends.
	started := make(chan error, 1)
	waited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waited <- cmd.Wait()
	}()
	err = <-started
	theirs.Close()
	if err != nil {
		return fmt.Errorf("envbuild: starting %s: %w", c.argv[0], err)
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()

	if c.allow != nil {
		px, err := serveHandoff(ours, *c.allow, c.log, c.label)
		if err != nil {
			_ = cmd.Process.Kill()
			<-waited
			return err
		}
		defer px.Close()
	}
	err = <-waited
	if ctx.Err() != nil {
		return fmt.Errorf("envbuild: %s: %w", c.argv[0], ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("envbuild: %s: %w", c.argv[0], err)
	}
	return nil
}

// serveHandoff receives the helper's listening socket and serves the
// egress proxy on it.
func serveHandoff(sock *os.File, allow egress.Policy, log io.Writer, label string) (*egress.Proxy, error) {
	_ = sock.SetReadDeadline(time.Now().Add(handoffTimeout))
	_, fd, err := fdpass.Receive(sock)
	if errors.Is(err, io.EOF) {
		err = errors.New("the helper ended before handing it over")
	}
	if err != nil {
		return nil, fmt.Errorf("envbuild: the build's proxy socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "proxy")
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("envbuild: the build's proxy socket: %w", err)
	}
	px := egress.New(allow, egress.Options{
		// Refusals only: one line per downloaded package says nothing.
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Label:  label,
		// Large packages: a stalled mirror ends the transfer, a slow one not.
		IdleTimeout: 2 * time.Minute,
	})
	go func() { _ = px.Serve(l) }()
	return px, nil
}

// runConfineHelper is the helper's main: os.Args are [exe, confineArg,
// mode, path, args...]. It sets up the namespaces it was cloned into,
// runs the command as its child, reaps every process, and exits as the
// command did.
func runConfineHelper() int {
	if len(os.Args) < 4 || os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "envbuild helper: not started by envbuild")
		return 125
	}
	mode, argv := os.Args[2], os.Args[3:]
	if err := setupConfined(mode); err != nil {
		fmt.Fprintln(os.Stderr, "envbuild helper:", err)
		return 125
	}
	// Signals for the build reach the command; SIGKILL of this process
	// still ends the whole namespace.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		fmt.Fprintln(os.Stderr, "envbuild helper:", err)
		return 125
	}
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{devNull, os.Stdout, os.Stderr},
	})
	devNull.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "envbuild helper:", err)
		return 125
	}
	go func() {
		for s := range sigs {
			_ = p.Signal(s)
		}
	}()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 125
		}
		if pid != p.Pid {
			continue // an orphan of the build
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// setupConfined makes the helper's mounts private, gives it its own /proc,
// brings lo up and, in proxy mode, hands the proxy's listening socket over.
func setupConfined(mode string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mounts: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := loopback.Up(); err != nil {
		return err
	}
	defer unix.Close(fdHandoff)
	if mode != "proxy" {
		return nil
	}
	l, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", proxyPort))
	if err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	defer l.Close()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Sendmsg(fdHandoff, []byte{1}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
		return fmt.Errorf("handing the proxy socket over: %w", err)
	}
	return nil
}
