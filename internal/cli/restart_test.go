package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountsUnder lists the host's mount points under dir (this test runs in
// the host's mount namespace, as serve does).
func mountsUnder(t *testing.T, dir string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(f[4])
		if strings.HasPrefix(mp, dir+"/") {
			out[mp] = true
		}
	}
	return out
}

// killServe ends serve with SIGKILL (no teardown at all) and waits until
// it is gone.
func killServe(t *testing.T, s *server) {
	t.Helper()
	pid := s.cmd.Process.Pid
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("serve still there 10 s after SIGKILL")
		}
	}
}

// TestServeRestartReclaimsStaleWorkspaces: serve SIGKILLed with sessions
// open leaves their tmpfs workspaces mounted; a restart on the same state
// directory unmounts and removes every one of them (judged from the host's
// mountinfo and directories), says how many, and works; the workspaces of
// another serve running on the same state directory are left alone.
func TestServeRestartReclaimsStaleWorkspaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("workspaces are tmpfs mounts only as root: this test needs root")
	}
	state := t.TempDir()
	sessions := filepath.Join(state, "sessions")
	env := []string{"SANDBOX_STATE_DIR=" + state, "SANDBOX_POOL_SIZE=1", "SANDBOX_ENABLE_FILESYSTEM=true"}
	open := func(url string) string {
		t.Helper()
		code, info := call(t, "POST", url+"/sessions", "", map[string]any{"profile": "filesystem"})
		id, _ := info["session_id"].(string)
		if code != 201 && code != 200 || id == "" {
			t.Fatalf("create session: %d %v", code, info)
		}
		if code, res := call(t, "POST", url+"/sessions/"+id+"/execute", "", map[string]any{"code": "open('data', 'w').write('x' * 3_000_000)\nprint('kept')"}); code != 200 || res["stdout"] != "kept\n" {
			t.Fatalf("session %s: %d %v", id, code, res)
		}
		return id
	}

	other := startServe(t, env...)
	otherID := open(other.url)
	otherMounts := mountsUnder(t, sessions)

	first := startServe(t, env...)
	for range 4 {
		open(first.url)
	}
	stale := map[string]bool{}
	for mp := range mountsUnder(t, sessions) {
		if !otherMounts[mp] {
			stale[mp] = true
		}
	}
	if len(stale) < 8 { // 4 sessions, a workspace and a package directory each
		t.Fatalf("want at least 8 workspace mounts of the first serve, have %d", len(stale))
	}
	killServe(t, first)
	for mp := range stale {
		if !mountsUnder(t, sessions)[mp] {
			t.Fatalf("%s unmounted by SIGKILL alone: the test proves nothing", mp)
		}
	}

	restarted := startServe(t, env...)
	now := mountsUnder(t, sessions)
	for mp := range stale {
		if now[mp] {
			t.Errorf("stale workspace still mounted after the restart: %s", mp)
		}
		if _, err := os.Lstat(mp); !os.IsNotExist(err) {
			t.Errorf("stale workspace directory still there: %s (%v)", mp, err)
		}
	}
	if want := "workspaces=" + strconv.Itoa(len(stale)); !strings.Contains(restarted.stderr.String(), "removed the session workspaces") || !strings.Contains(restarted.stderr.String(), want) {
		t.Errorf("the restart does not say it removed %d workspaces; stderr:\n%s", len(stale), restarted.stderr)
	}
	t.Logf("%d stale workspace mounts of the killed serve; the restart logged: %s", len(stale), grepLine(restarted.stderr.String(), "removed the session workspaces"))
	// The other serve's workspaces are its own: still mounted, still used.
	for mp := range otherMounts {
		if !now[mp] {
			t.Errorf("the restart unmounted a live serve's workspace: %s", mp)
		}
	}
	if code, res := call(t, "POST", other.url+"/sessions/"+otherID+"/execute", "", map[string]any{"code": "len(open('data').read())"}); code != 200 || res["result"] != float64(3_000_000) {
		t.Errorf("the other serve's session after the restart: %d %v", code, res)
	}
	// The restarted serve works.
	id := open(restarted.url)
	if code, res := call(t, "POST", restarted.url+"/sessions/"+id+"/execute", "", map[string]any{"code": "len(open('data').read())"}); code != 200 || res["result"] != float64(3_000_000) {
		t.Errorf("a new session after the restart: %d %v", code, res)
	}
}

func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
