package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/pgtest"
)

// previousRelease is the last commit whose replicas speak only the first
// peer protocol (a call's arguments beside its envelope, no Args): in a
// rolling upgrade its replicas run beside this release's. When the v1
// reader goes (service/peerv1.go says when), this test goes with it.
const previousRelease = "9e34a39868c27bc93a74c12f80187bea15818e96"

// buildPreviousRelease builds codecage as it was at previousRelease, from
// this repository's history, into a directory of the test's.
func buildPreviousRelease(t *testing.T) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the repository's top: %v (the upgrade test builds an earlier release from its history)", err)
	}
	repo := strings.TrimSpace(string(top))
	if out, err := exec.Command("git", "-C", repo, "cat-file", "-e", previousRelease+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("the history lacks %s, the release this one upgrades (a shallow clone? git fetch --unshallow): %v %s", previousRelease, err, out)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, previousRelease, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("unpacking %s: %v %s", previousRelease, err, out)
	}
	exe := filepath.Join(t.TempDir(), "codecage-previous")
	build := exec.Command("go", "build", "-trimpath", "-o", exe, "./cmd/codecage")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", previousRelease, err, out)
	}
	return exe
}

// TestRollingUpgradeKeepsForwarding: a replica of the previous release
// and one of this release share PostgreSQL, as in the middle of a rolling
// upgrade. A session on either is used through the other (runs, files,
// commands, close), so forwarding answers both ways: this release sends
// the old shape to a replica that has not said it reads the new one, and
// reads the old shape it is sent.
func TestRollingUpgradeKeepsForwarding(t *testing.T) {
	old := buildPreviousRelease(t)
	pg := pgtest.Start(t)
	oldAddr, oldEnv := replicaEnv(t, pg.DSN(), "replica-old")
	previous := startServeBinary(t, old, []string{"serve", "--listen", oldAddr}, oldEnv...)
	newAddr, newEnv := replicaEnv(t, pg.DSN(), "replica-new")
	current := startServeOn(t, newAddr, newEnv...)

	for _, c := range []struct {
		name          string
		owner, caller *server
	}{
		{"a session of the previous release, used through this one", previous, current},
		{"a session of this release, used through the previous one", current, previous},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, info := call(t, "POST", c.owner.url+"/sessions", aliceKey, map[string]any{})
			if code != 201 {
				t.Fatalf("create session: %d %v", code, info)
			}
			id := info["session_id"].(string)
			via := c.caller.url
			if code, res := call(t, "POST", via+"/sessions/"+id+"/execute", aliceKey, map[string]any{"code": "n = 41"}); code != 200 || res["success"] != true {
				t.Fatalf("first run: %d %v", code, res)
			}
			if code, res := call(t, "POST", via+"/execute", aliceKey, map[string]any{"session_id": id, "code": "n + 1"}); code != 200 || res["result"] != float64(42) {
				t.Fatalf("second run: %d %v", code, res)
			}
			if code, res := call(t, "PUT", via+"/sessions/"+id+"/files/content", aliceKey, map[string]any{"path": "in.txt", "content": "across releases"}); code != 200 {
				t.Fatalf("write file: %d %v", code, res)
			}
			if code, res := call(t, "POST", c.owner.url+"/sessions/"+id+"/execute", aliceKey, map[string]any{"code": "open('in.txt').read().upper()"}); code != 200 || res["result"] != "ACROSS RELEASES" {
				t.Fatalf("the owner reads the file: %d %v", code, res)
			}
			if code, res := call(t, "GET", via+"/sessions/"+id+"/files/content?path=in.txt", aliceKey, nil); code != 200 || res["content"] != "across releases" {
				t.Fatalf("read file: %d %v", code, res)
			}
			if code, res := call(t, "POST", via+"/commands", aliceKey, map[string]any{"session_id": id, "command": "ls"}); code != 200 || strings.TrimSpace(res["stdout"].(string)) != "in.txt" {
				t.Fatalf("command in the session: %d %v", code, res)
			}
			if code, res := call(t, "POST", via+"/execute", bobKey, map[string]any{"session_id": id, "code": "n"}); code != 404 || res["kind"] != "session_not_found" {
				t.Fatalf("another key: %d %v", code, res)
			}
			if code, res := call(t, "DELETE", via+"/sessions/"+id, aliceKey, nil); code != 204 {
				t.Fatalf("close: %d %v", code, res)
			}
			if c.owner != current {
				return // the previous release answers 503 here (it looks for a parked copy it cannot open)
			}
			// The cluster has no snapshot secret, so no parked copy can
			// exist anywhere: the closed session is not found.
			if code, res := call(t, "POST", current.url+"/execute", aliceKey, map[string]any{"session_id": id, "code": "n"}); code != 404 || res["kind"] != "session_not_found" {
				t.Fatalf("a run after the close: %d %v", code, res)
			}
		})
	}
}
