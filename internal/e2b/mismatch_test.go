package e2b_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue #27's mismatches, each as E2B answers.

// envd calls a Connect procedure of the sandbox's daemon (JSON).
func (b *box) envd(procedure, body string) (int, map[string]any) {
	b.t.Helper()
	return call(b.t, "POST", b.srv.URL+procedure, body, map[string]string{"E2b-Sandbox-Id": b.id, "E2b-Sandbox-Port": "49983", "X-Access-Token": b.token})
}

// A directory's mode is its permission bits (493 = 0o755), without Go's
// type bits; a file's too.
func TestFileModesArePermissionBits(t *testing.T) {
	srv, svc := newServer(t)
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	// Planted from the host, with the modes set past the umask.
	ws := filepath.Join(svc.Config().StateDir, "sessions", b.id)
	if err := os.Mkdir(filepath.Join(ws, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "f"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(filepath.Join(ws, "d"), 0o755)
	_ = os.Chmod(filepath.Join(ws, "f"), 0o640)
	for _, tc := range []struct {
		path string
		mode float64
	}{{"/home/user/d", 0o755}, {"/home/user/f", 0o640}} {
		status, out := b.envd("/filesystem.Filesystem/Stat", `{"path": "`+tc.path+`"}`)
		entry, _ := out["entry"].(map[string]any)
		if status != 200 || entry == nil {
			t.Fatalf("stat %s: %d %v", tc.path, status, out)
		}
		if entry["mode"] != tc.mode {
			t.Errorf("%s: mode %v, want %v (%v)", tc.path, entry["mode"], tc.mode, entry)
		}
	}
}

// Removing a path that is not there succeeds, as envd's; a path outside
// the workspace is still refused.
func TestRemoveMissingPathSucceeds(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	for _, p := range []string{"/home/user/nope", "/home/user/no/such/dir"} {
		if status, out := b.envd("/filesystem.Filesystem/Remove", `{"path": "`+p+`"}`); status != 200 {
			t.Errorf("remove %s: %d %v", p, status, out)
		}
	}
	if status, out := b.envd("/filesystem.Filesystem/Remove", `{"path": "/etc/passwd"}`); status == 200 {
		t.Errorf("remove /etc/passwd: %d %v", status, out)
	}
}

// Template.exists: E2B's built-in templates codecage serves are aliases;
// any other name is 404 with E2B's body.
func TestTemplateAliases(t *testing.T) {
	srv, _ := newServer(t)
	for _, name := range []string{"base", "code-interpreter-v1"} {
		status, body := ctl(t, srv, "GET", "/templates/aliases/"+name, "")
		if status != 200 || body["templateID"] != name || body["public"] != true {
			t.Errorf("%s: %d %v", name, status, body)
		}
	}
	for _, name := range []string{"nonexistent-1234", "desktop", strings.Repeat("x", 300)} {
		status, body := ctl(t, srv, "GET", "/templates/aliases/"+name, "")
		if status != 404 || body["code"] != float64(404) || len(body["message"].(string)) > 300 {
			t.Errorf("%s: %d %v", name[:min(len(name), 20)], status, body)
		}
	}
	if status, _ := call(t, "GET", srv.URL+"/templates/aliases/base", "", nil); status != 401 {
		t.Errorf("without a key: %d", status)
	}
}
