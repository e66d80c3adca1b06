package gvisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/reexec"
)

// The terminal runsc gives a program is a host terminal, which gVisor's
// kernel passes through but does not know as one of its own: `tty` says
// "not a tty", ps shows none (google/gvisor#13535). So a command on a
// terminal runs under a relay, this very binary bound read-only into the
// sandbox: inside gVisor it opens a terminal of gVisor's own devpts, runs
// the command on it as its controlling terminal, and copies bytes between
// that terminal and the host one (raw, set from the host side). It runs
// as the command's uid, under its seccomp filter and limits, as PID 1:
// its end ends the sandbox.

const (
	// relayArg, as the binary's first argument, makes it the relay.
	relayArg = "codecage-gvisor-terminal"
	// relayPath is where the relay is bound inside the sandbox.
	relayPath = "/run/codecage-terminal"
	// relayDrain bounds how long the relay waits, once the command has
	// ended, for output a process it left behind holds the terminal for.
	relayDrain = 200 * time.Millisecond
)

func init() { reexec.Register(relayArg, runRelay) }

// relayBinary is the host file bound at relayPath: this binary.
func relayBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("gvisor: the terminal relay: %w", err)
	}
	return exe, nil
}

// relayArgv is argv run under the relay.
func relayArgv(argv []string) []string {
	return append([]string{relayPath, relayArg}, argv...)
}

// runRelay is the relay's main: it runs os.Args[2:] on a terminal of the
// sandbox's devpts and exits as it did (128+n for signal n).
func runRelay() int {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "codecage terminal relay: no command")
		return 125
	}
	master, slave, err := openInnerTerminal()
	if err != nil {
		fmt.Fprintln(os.Stderr, "codecage terminal relay:", err)
		return 125
	}
	copySize(master)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	cmd := exec.Command(os.Args[2], os.Args[3:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	_ = slave.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "codecage terminal relay:", err)
		return 127
	}
	go func() {
		for range winch {
			copySize(master)
		}
	}()
	go func() { _, _ = io.Copy(master, os.Stdin) }()
	out := make(chan struct{})
	go func() {
		_, _ = io.Copy(os.Stdout, master)
		close(out)
	}()
	_ = cmd.Wait()
	// What the command wrote is in the terminal's buffer; a process it
	// left in the background may hold the terminal open for ever.
	_ = master.SetReadDeadline(time.Now().Add(relayDrain))
	<-out
	st := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if st.Signaled() {
		return 128 + int(st.Signal())
	}
	return st.ExitStatus()
}

// openInnerTerminal opens a terminal of gVisor's devpts: its master, and
// the slave of that very master.
func openInnerTerminal() (master, slave *os.File, err error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		_ = unix.Close(m)
		return nil, nil, fmt.Errorf("unlock the terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		_ = unix.Close(m)
		return nil, nil, fmt.Errorf("the terminal's number: %w", err)
	}
	s, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(m)
		return nil, nil, fmt.Errorf("open the terminal's slave: %w", err)
	}
	// Non-blocking, so that os.File polls it and reads take deadlines.
	if err := unix.SetNonblock(m, true); err != nil {
		_ = unix.Close(m)
		_ = unix.Close(s)
		return nil, nil, err
	}
	return os.NewFile(uintptr(m), "ptmx"), os.NewFile(uintptr(s), "pts"), nil
}

// copySize gives the inner terminal the host terminal's size (stdin's):
// gVisor's kernel then signals the command's foreground group.
func copySize(master *os.File) {
	ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
	if err != nil {
		return
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { _ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) })
}

// makeRaw puts the host terminal, through its master, in raw mode: the
// inner terminal does the line editing, echo and output processing, once.
func makeRaw(master *os.File) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) {
		t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		if err != nil {
			opErr = err
			return
		}
		t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		t.Oflag &^= unix.OPOST
		t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		t.Cflag &^= unix.CSIZE | unix.PARENB
		t.Cflag |= unix.CS8
		t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
		opErr = unix.IoctlSetTermios(int(fd), unix.TCSETS, t)
	}); err != nil {
		return err
	}
	if opErr != nil {
		return errors.New("gvisor: raw terminal: " + opErr.Error())
	}
	return nil
}
