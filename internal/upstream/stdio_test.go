package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// everythingVersion is the version e2e/upstream/package.json pins.
const everythingVersion = "2026.8.31"

// everything returns the entry point of @modelcontextprotocol/server-everything
// as installed in e2e/upstream, installing it first if needed (scripts/npm-deps.sh).
func everything(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "e2e", "upstream"))
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything")
	if _, err := os.Stat(filepath.Join(pkg, "package.json")); err != nil {
		// The one installer of the suite's npm packages: packages run
		// side by side, and two npm ci in one directory would clash.
		cmd := exec.Command("scripts/npm-deps.sh", "e2e/upstream")
		cmd.Dir = filepath.Join(dir, "..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci of %s: %v\n%s", dir, err, out)
		}
	}
	var meta struct {
		Version string            `json:"version"`
		Bin     map[string]string `json:"bin"`
	}
	b, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Version != everythingVersion {
		t.Fatalf("server-everything %s is installed, want %s: run npm ci in %s", meta.Version, everythingVersion, dir)
	}
	return filepath.Join(pkg, meta.Bin["mcp-server-everything"])
}

// procInfo is a process found in /proc.
type procInfo struct {
	pid     int
	cmdline string
	state   byte
}

// processesWith lists the live (not zombie) processes whose environment
// holds marker and whose command line contains path.
func processesWith(t *testing.T, marker, path string) []procInfo {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(env, []byte(marker)) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cl := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		if !strings.Contains(cl, path) {
			continue
		}
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// The state follows the parenthesised command name.
		var state byte
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
			state = stat[i+2]
		}
		if state == 'Z' {
			continue
		}
		out = append(out, procInfo{pid: pid, cmdline: cl, state: state})
	}
	return out
}

// waitGone waits a little for processes to disappear: a SIGKILLed
// grandchild may take a moment to be gone.
func waitGone(t *testing.T, marker, path string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		ps := processesWith(t, marker, path)
		if len(ps) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind: %+v", ps)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStdioEverything(t *testing.T) {
	entry := everything(t)
	// Our own environment must not reach the upstream.
	t.Setenv("CODECAGE_OWN_SECRET", "the supervisor's own")
	marker := fmt.Sprintf("CODECAGE_UPSTREAM_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	markerName, markerValue, _ := strings.Cut(marker, "=")
	log, logs := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"everything": {
			Command: "node",
			Args:    []string{entry, "stdio"},
			Env:     map[string]string{"SECRET_TOKEN": "s3cr3t", markerName: markerValue},
		},
	}}, log)
	defer closeManager(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	tools, err := m.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(tools)
	t.Logf("server-everything %s tools: %v", everythingVersion, names)
	for _, want := range []string{"everything.echo", "everything.get-sum", "everything.get-env", "everything.get-structured-content"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s among %v", want, names)
		}
	}
	echo, err := m.Tool(ctx, "everything", "echo")
	if err != nil {
		t.Fatal(err)
	}
	if echo.Description != "Echoes back the input string" {
		t.Errorf("echo description = %q", echo.Description)
	}
	wantSig := `def echo(message: str) -> Any:
    """Echoes back the input string

    Args:
        message: Message to echo
    """
`
	if got := Signature(echo); got != wantSig {
		t.Errorf("Signature(echo) =\n%s\nwant\n%s", got, wantSig)
	}
	sum, err := m.Tool(ctx, "everything", "get-sum")
	if err != nil {
		t.Fatal(err)
	}
	if got := Signature(sum); !strings.HasPrefix(got, "def get_sum(a: float, b: float) -> Any:\n") {
		t.Errorf("Signature(get-sum) =\n%s", got)
	}

	// The environment is ours to choose, and nothing else.
	res, err := m.Call(ctx, "everything", "get-env", nil)
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(res.Text), &env); err != nil {
		t.Fatalf("get-env: %v: %s", err, res.Text)
	}
	wantEnv := map[string]string{"PATH": childPath, "HOME": os.Getenv("HOME"), "SECRET_TOKEN": "s3cr3t", markerName: markerValue}
	if !reflect.DeepEqual(env, wantEnv) {
		t.Errorf("upstream environment = %v, want %v", env, wantEnv)
	}

	// 50 rounds of echo and get-sum, from 5 goroutines at once.
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 5 {
		wg.Go(func() {
			for i := g * 10; i < g*10+10; i++ {
				msg := fmt.Sprintf("hello %d", i)
				res, err := m.Call(ctx, "everything", "echo", map[string]any{"message": msg})
				if err != nil {
					errs <- err
				} else if res.IsError || res.Text != "Echo: "+msg {
					errs <- fmt.Errorf("echo(%q) = %#v", msg, res)
				}
				res, err = m.Call(ctx, "everything", "get-sum", map[string]any{"a": i, "b": 0.5})
				want := fmt.Sprintf("The sum of %d and 0.5 is %d.5.", i, i)
				if err != nil {
					errs <- err
				} else if res.IsError || res.Text != want {
					errs <- fmt.Errorf("get-sum(%d, 0.5) = %#v, want %q", i, res, want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	res, err = m.Call(ctx, "everything", "get-structured-content", map[string]any{"location": "New York"})
	if err != nil {
		t.Fatal(err)
	}
	wantStructured := map[string]any{"temperature": float64(33), "conditions": "Cloudy", "humidity": float64(82)}
	if !reflect.DeepEqual(res.Structured, wantStructured) || res.IsError {
		t.Errorf("get-structured-content = %#v", res)
	}
	// Invalid arguments: the server says so, the session stays.
	res, err = m.Call(ctx, "everything", "get-sum", map[string]any{"a": "one"})
	if errors.Is(err, ErrUnavailable) || (err == nil && !res.IsError) {
		t.Errorf("get-sum(a=one) = %#v, %v", res, err)
	}

	st := statusOf(m, "everything")
	if !st.Connected || st.Transport != "stdio" || st.Tools != len(tools) || st.Error != "" {
		t.Errorf("status = %+v", st)
	}
	// The child's stderr is in our log, under its server's name.
	mustContain(t, logs.String(), "everything: Starting default (STDIO) server...")

	// A crash: the next call starts a new process.
	procs := processesWith(t, marker, entry)
	if len(procs) != 1 {
		t.Fatalf("want one server process, found %+v", procs)
	}
	old := procs[0].pid
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := statusOf(m, "everything")
		if !st.Connected && strings.Contains(st.Error, "signal: killed") {
			mustContain(t, st.Error, "connection lost")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the manager did not notice its server die: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err = m.Call(ctx, "everything", "echo", map[string]any{"message": "again"})
	if err != nil || res.Text != "Echo: again" {
		t.Fatalf("echo after the crash = %#v, %v", res, err)
	}
	procs = processesWith(t, marker, entry)
	if len(procs) != 1 || procs[0].pid == old {
		t.Fatalf("after the crash, want one new server process, found %+v (old pid %d)", procs, old)
	}

	closeManager(t, m)
	waitGone(t, marker, entry)
	if _, err := m.Call(ctx, "everything", "echo", map[string]any{"message": "x"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Call after Close: %v", err)
	}
}

// A wrapper (like npx, or here sh) between us and the server: Close must
// not leave the server, its grandchild, behind.
func TestStdioGrandchildren(t *testing.T) {
	entry := everything(t)
	marker := fmt.Sprintf("CODECAGE_UPSTREAM_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	markerName, markerValue, _ := strings.Cut(marker, "=")
	log, _ := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		// The trailing command keeps sh from exec'ing node in its place.
		"wrapped": {Command: "sh", Args: []string{"-c", `node "$0" stdio; echo "node exited" >&2`, entry}, Env: map[string]string{markerName: markerValue}},
	}}, log)
	defer closeManager(t, m)
	ctx := context.Background()
	res, err := m.Call(ctx, "wrapped", "echo", map[string]any{"message": "hi"})
	if err != nil || res.Text != "Echo: hi" {
		t.Fatalf("echo = %#v, %v", res, err)
	}
	procs := processesWith(t, marker, entry)
	if len(procs) != 2 {
		t.Fatalf("want sh and node, found %+v", procs)
	}
	closeManager(t, m)
	waitGone(t, marker, entry)
}

func TestStdioCannotStart(t *testing.T) {
	log, logs := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"missing": {Command: "/nonexistent/mcp-server"},
		"nopath":  {Command: "no-such-command-anywhere"},
		"exits":   {Command: "sh", Args: []string{"-c", "echo 'cannot start: bad config' >&2; exit 3"}},
		"garbage": {Command: "sh", Args: []string{"-c", "echo 'this is not JSON-RPC'; sleep 60"}},
	}}, log)
	defer closeManager(t, m)
	ctx := context.Background()
	tools, err := m.Tools(ctx)
	if err != nil || len(tools) != 0 {
		t.Fatalf("Tools = %v, %v", toolNames(tools), err)
	}
	for name, want := range map[string]string{
		"missing": "no such file or directory",
		"nopath":  `"no-such-command-anywhere" not found in PATH /usr/local/bin:/usr/bin:/bin`,
		"exits":   "exit status 3",
		"garbage": "invalid",
	} {
		st := statusOf(m, name)
		t.Logf("%s: %s", name, st.Error)
		if st.Connected || !strings.Contains(st.Error, want) {
			t.Errorf("status of %s = %+v, want an error with %q", name, st, want)
		}
		start := time.Now()
		_, err := m.Call(ctx, name, "echo", nil)
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("Call(%s) error = %v, want ErrUnavailable", name, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("Call(%s) took %v", name, d)
		}
	}
	mustContain(t, logs.String(), "cannot start: bad config")
}
