package jail

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is written by the sandbox's copier while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until the buffer holds want, or fails after d.
func (l *lockedBuffer) waitFor(t *testing.T, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(l.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output within %s: %q", want, d, l.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startInteractive(t *testing.T, spec Spec) (*Sandbox, *lockedBuffer) {
	t.Helper()
	out := &lockedBuffer{}
	spec.Stdout, spec.Stderr = out, out
	sb, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		sb.Kill(LimitNone)
		sb.Wait()
		sb.Channel().Close()
	})
	return sb, out
}

func TestStdinReachesTheProgramAndCloseEndsIt(t *testing.T) {
	sb, out := startInteractive(t, Spec{Argv: python("import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)\nprint('eof')"), Stdin: true})
	if _, err := sb.WriteInput([]byte("hello\n"), time.Second); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "HELLO\n", 10*time.Second)
	if _, err := sb.WriteInput([]byte("again\n"), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := sb.CloseInput(); err != nil {
		t.Fatal(err)
	}
	exit := sb.Wait()
	if exit.ExitCode != 0 || out.String() != "HELLO\nAGAIN\neof\n" {
		t.Fatalf("exit %+v, output %q", exit, out.String())
	}
	if _, err := sb.WriteInput([]byte("late"), time.Second); !errors.Is(err, ErrNoInput) {
		t.Fatalf("a write after close: %v, want ErrNoInput", err)
	}
}

func TestWithoutStdinTheProgramReadsNothing(t *testing.T) {
	sb, out := startInteractive(t, Spec{Argv: python("import sys; print(repr(sys.stdin.read()))")})
	if _, err := sb.WriteInput([]byte("x"), time.Second); !errors.Is(err, ErrNoInput) {
		t.Fatalf("write to a program without stdin: %v, want ErrNoInput", err)
	}
	if exit := sb.Wait(); exit.ExitCode != 0 || out.String() != "''\n" {
		t.Fatalf("exit %+v, output %q", exit, out.String())
	}
}

// A program that does not read gets no more than the pipe holds: the
// writer waits, then gives up, and nothing piles up on the host.
func TestStdinThatIsNotReadPushesBack(t *testing.T) {
	sb, _ := startInteractive(t, Spec{Argv: python("import time; time.sleep(60)"), Stdin: true})
	start := time.Now()
	n, err := sb.WriteInput(make([]byte, 4<<20), 300*time.Millisecond)
	if !errors.Is(err, ErrInputFull) {
		t.Fatalf("4 MiB to a program that does not read: %d written, %v; want ErrInputFull", n, err)
	}
	if n > 1<<20 || time.Since(start) > 5*time.Second {
		t.Fatalf("%d bytes taken in %s: more than a pipe holds, or no deadline", n, time.Since(start))
	}
}

// The program's signals are its own: the init catches its signals rather
// than ignoring them, so none is ignored from the start in the program
// (a plain kill, SIGTERM, ends a background sleep).
func TestProgramSignalsStartAtTheirDefaults(t *testing.T) {
	exit, out, errOut := startAndWait(t, Spec{Argv: []string{"/bin/sh", "-c", "grep SigIgn /proc/self/status; sleep 30 & kill $!; wait $!; echo status $?"}})
	if exit.ExitCode != 0 || !strings.Contains(out, "SigIgn:\t0000000000000000\n") || !strings.Contains(out, "status 143\n") {
		t.Fatalf("exit %+v, out %q, err %q: the program starts with ignored signals", exit, out, errOut)
	}
}

const terminalProbe = `
import fcntl, os, signal, struct, sys, termios
def size():
    return struct.unpack('hh', fcntl.ioctl(0, termios.TIOCGWINSZ, b'0000'))
print('tty', os.isatty(0), os.isatty(1), os.ttyname(0), 'pgrp', os.tcgetpgrp(0) == os.getpgrp(), 'size', size(), flush=True)
try:
    fcntl.ioctl(0, termios.TIOCSTI, b'x')
    print('TIOCSTI allowed', flush=True)
except OSError as e:
    print('TIOCSTI refused', e.errno, flush=True)
signal.signal(signal.SIGWINCH, lambda *a: print('winch', size(), flush=True))
line = sys.stdin.readline()
print('read', repr(line), flush=True)
signal.pause()
`

func TestTerminalIsTheProgramsControllingTerminal(t *testing.T) {
	sb, out := startInteractive(t, Spec{Argv: python(terminalProbe), Terminal: &WindowSize{Cols: 80, Rows: 24}})
	out.waitFor(t, "TIOCSTI", 10*time.Second)
	first := out.String()
	if !strings.Contains(first, "tty True True /dev/pts/0 pgrp True size (24, 80)") {
		t.Fatalf("the program's terminal: %q", first)
	}
	if !strings.Contains(first, "TIOCSTI refused 1") {
		t.Fatalf("TIOCSTI on the program's own terminal: %q", first)
	}
	if _, err := sb.WriteInput([]byte("typed\n"), time.Second); err != nil {
		t.Fatal(err)
	}
	// The terminal echoes input and maps the newline as a terminal does.
	out.waitFor(t, "typed\r\n", 5*time.Second)
	out.waitFor(t, "read 'typed\\n'", 5*time.Second)
	if err := sb.Resize(WindowSize{Cols: 100, Rows: 30}); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "winch (30, 100)", 5*time.Second)
	if err := sb.Resize(WindowSize{Cols: 0, Rows: 30}); err == nil {
		t.Fatal("a terminal 0 columns wide was accepted")
	}
}

func TestTerminalSizeIsChecked(t *testing.T) {
	for _, w := range []WindowSize{{0, 24}, {80, 0}, {MaxTerminalSide + 1, 24}} {
		if sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/true"}, Terminal: &w}); err == nil {
			sb.Kill(LimitNone)
			sb.Wait()
			t.Fatalf("terminal %+v accepted", w)
		}
	}
}
