package runtime

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// startHarness runs the harness as a plain process (no jail: this tests
// the harness's protocol, not the isolation) and returns its channel.
func startHarness(t *testing.T) *os.File { return startHarnessWith(t) }

// startHarnessWith is startHarness with extra descriptors inherited after
// the channel (fd 4 on).
func startHarnessWith(t *testing.T, extra ...*os.File) *os.File {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "supervisor"), os.NewFile(uintptr(fds[1]), "harness")
	argv := Argv("/usr/bin/python3")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.ExtraFiles, cmd.Dir = Env(), append([]*os.File{theirs}, extra...), t.TempDir()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	t.Cleanup(func() {
		ours.Close()
		_ = cmd.Wait()
	})
	return ours
}

func run(t *testing.T, ch *os.File, req Request) *Reply {
	t.Helper()
	req.KeepAlive, req.MaxResultBytes = true, 1<<16
	a := Exchange(ch, req, nil)
	if a.Reply == nil {
		t.Fatalf("no reply to %q", req.Code)
	}
	if a.Reply.Error != nil {
		t.Fatalf("%q: %s", req.Code, a.Reply.Error.Traceback)
	}
	return a.Reply
}

// Contexts are interpreter states side by side in one harness: each keeps
// its own variables and working directory; a new context starts empty.
func TestContextsKeepTheirOwnState(t *testing.T) {
	ch := startHarness(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, ch, Request{Code: "x = 1"})
	run(t, ch, Request{Code: "x = 2", Context: "b", NewContext: true, Cwd: dir})
	if got := string(run(t, ch, Request{Code: "x"}).Result); got != "1" {
		t.Fatalf("default context x = %s", got)
	}
	run(t, ch, Request{Code: "import os; os.chdir('sub')", Context: "b"})
	rep := run(t, ch, Request{Code: "import os; (x, os.getcwd())", Context: "b"})
	var got []any
	if err := json.Unmarshal(rep.Result, &got); err != nil || got[0] != float64(2) || got[1] != filepath.Join(dir, "sub") {
		t.Fatalf("context b: %s (%v)", rep.Result, err)
	}
	rep = run(t, ch, Request{Code: "'x' in globals()", Context: "b", NewContext: true, Cwd: dir})
	if string(rep.Result) != "false" {
		t.Fatalf("a restarted context kept its variables: %s", rep.Result)
	}
}

// Env applies to one request; Display gives a notebook's representations.
func TestEnvAndDisplay(t *testing.T) {
	ch := startHarness(t)
	rep := run(t, ch, Request{Code: "import os; os.environ.get('GREETING')", Env: map[string]string{"GREETING": "hi"}})
	if string(rep.Result) != `"hi"` {
		t.Fatalf("env: %s", rep.Result)
	}
	if rep := run(t, ch, Request{Code: "os.environ.get('GREETING')"}); string(rep.Result) != "null" && rep.Result != nil {
		t.Fatalf("env outlived its request: %s", rep.Result)
	}
	code := `class T:
    def _repr_html_(self): return "<b>t</b>"
    def _repr_png_(self): return b"\x89PNG"
    def _repr_markdown_(self): raise ValueError("broken")
    def __repr__(self): return "T()"
T()`
	rep = run(t, ch, Request{Code: code, Display: true})
	want := map[string]string{"text/plain": "T()", "text/html": "<b>t</b>", "image/png": "iVBORw=="}
	if len(rep.Display) != len(want) {
		t.Fatalf("display %v", rep.Display)
	}
	for k, v := range want {
		if rep.Display[k] != v {
			t.Fatalf("display[%s] = %q, want %q", k, rep.Display[k], v)
		}
	}
	if rep := run(t, ch, Request{Code: "41 + 1", Display: true}); rep.Display["text/plain"] != "42" {
		t.Fatalf("display of 42: %v", rep.Display)
	}
	if rep := run(t, ch, Request{Code: "41 + 1"}); rep.Display != nil {
		t.Fatalf("display without asking: %v", rep.Display)
	}
}
