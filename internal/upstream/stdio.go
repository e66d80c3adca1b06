package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// childPath is the PATH a stdio upstream gets unless its Env sets one.
const childPath = "/usr/local/bin:/usr/bin:/bin"

// Shutdown of a stdio upstream: closing its stdin asks it to exit (the MCP
// spec's way), then SIGTERM, then SIGKILL, each to the whole process group.
var (
	stdinGrace = 2 * time.Second
	termGrace  = 1 * time.Second
	quickExit  = 100 * time.Millisecond
)

// Stdio is a running stdio server: its streams, and how it ended.
type Stdio interface {
	Stdout() io.ReadCloser
	Stdin() io.WriteCloser
	// Stop ends it: graceful closes its stdin first, as MCP asks.
	Stop(graceful bool)
	// ExitDescription says how it ended if it ended by itself ("" if
	// not); StderrTail is its last stderr lines, for the log.
	ExitDescription() string
	StderrTail() string
}

// Launcher starts a stdio server elsewhere than as a process of ours (a
// sandbox: ServerConfig.Sandbox).
type Launcher func(ctx context.Context, name string, cfg ServerConfig, log *slog.Logger) (Stdio, error)

// process is a running stdio upstream. It leads its own process group, so
// that npx/npm/sh wrappers and whatever they start die with it.
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File // our end of its stdin
	stdout *os.File // our end of its stdout
	// exited is closed when the leader has exited. It is left a zombie
	// (waitid WNOWAIT) until stop has signalled the group: while the zombie
	// exists its pid, and so the group id, cannot be reused.
	exited chan struct{}
	// stderrDone is closed when every holder of its stderr has gone.
	stderrDone chan struct{}

	mu        sync.Mutex
	tail      []string // its last stderr lines
	exitState string   // how it ended, if it ended by itself
}

func (p *process) Stdout() io.ReadCloser { return p.stdout }
func (p *process) Stdin() io.WriteCloser { return p.stdin }

// tailLines is how many of its last stderr lines the log repeats when it
// fails to start or dies.
const tailLines = 5

// exitDescription says how a process ended if it ended by itself, "" if
// not. (Its stderr goes to the log only: it may well quote its secrets.)
func (p *process) ExitDescription() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitState
}

// stderrTail is its last few stderr lines, for the log.
func (p *process) StderrTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, " | ")
}

// childEnv is the whole environment of a stdio upstream: PATH, HOME and the
// configured variables, sorted for a stable order.
func childEnv(cfg ServerConfig) []string {
	env := map[string]string{"PATH": childPath, "HOME": os.Getenv("HOME")}
	if env["HOME"] == "" {
		env["HOME"] = "/"
	}
	for k, v := range cfg.Env {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// lookPath finds command in the child's PATH rather than ours: the child
// runs with its own.
func lookPath(command string, env []string) (string, error) {
	if strings.Contains(command, "/") {
		return command, nil
	}
	path := childPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, command)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %s", command, path)
}

// startProcess starts a stdio upstream; its stderr goes to log line by line.
func startProcess(name string, cfg ServerConfig, log *slog.Logger) (_ *process, err error) {
	env := childEnv(cfg)
	path, err := lookPath(cfg.Command, env)
	if err != nil {
		return nil, err
	}
	// Our own pipes rather than exec's: exec's copying goroutines would make
	// Wait hang on a grandchild that holds stderr open.
	var closers []*os.File
	defer func() {
		for _, f := range closers {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			closers = append(closers, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, cfg.Args...)
	cmd.Args[0] = cfg.Command
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	closers = []*os.File{inR, outW, errW} // the child's ends, ours no longer
	p := &process{cmd: cmd, stdin: inW, stdout: outR, exited: make(chan struct{}), stderrDone: make(chan struct{})}
	go p.watchExit()
	go func() {
		defer close(p.stderrDone)
		p.logLines(errR, name, log)
		errR.Close()
	}()
	return p, nil
}

// maxLogLine bounds one logged stderr line; the rest of a longer one is
// logged as further lines.
const maxLogLine = 16 << 10

func (p *process) logLines(r io.Reader, name string, log *slog.Logger) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		if s := strings.TrimRight(string(line), "\r\n"); s != "" {
			log.Debug(name+": "+s, "upstream", name, "stream", "stderr")
			if len(s) > 300 {
				s = s[:300] + "…"
			}
			p.mu.Lock()
			p.tail = append(p.tail, s)
			if len(p.tail) > tailLines {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// stop ends the process group. Gracefully, the leader first gets the time
// to exit by itself after its stdin closes, then SIGTERM; otherwise only a
// moment (a crashed server is usually gone already, and then we can say how
// it ended). The group is SIGKILLed in any case, so nothing it started
// outlives it. stop reaps the leader and returns once the group is gone (or
// has had every chance).
func (p *process) Stop(graceful bool) {
	p.stdin.Close()
	pgid := p.cmd.Process.Pid
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-p.exited:
			return true
		case <-t.C:
			return false
		}
	}
	grace := quickExit
	if graceful {
		grace = stdinGrace
	}
	byItself := wait(grace)
	if !byItself && graceful {
		_ = unix.Kill(-pgid, unix.SIGTERM)
		wait(termGrace)
	}
	_ = unix.Kill(-pgid, unix.SIGKILL)
	<-p.exited
	_ = p.cmd.Wait()
	if byItself && p.cmd.ProcessState != nil {
		p.mu.Lock()
		p.exitState = "exited by itself (" + p.cmd.ProcessState.String() + ")"
		p.mu.Unlock()
	}
	p.stdout.Close()
	// stderr ends when the last member of the group is gone; one that left
	// the group (setsid) may hold it longer, and is not waited for.
	select {
	case <-p.stderrDone:
	case <-time.After(time.Second):
	}
}
