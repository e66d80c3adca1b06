package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sessionsServer is a real `codecage serve` with an API key, its state
// in a temporary directory; the client commands find it through
// CODECAGE_URL and CODECAGE_API_KEY.
func sessionsServer(t *testing.T) (s *server, key string) {
	t.Helper()
	key = "cli-key-0123456789abcdef"
	dir := t.TempDir()
	s = startServe(t, "SANDBOX_API_KEYS=alice:"+key, "SANDBOX_RATE_LIMIT=0",
		"SANDBOX_STATE_DIR="+filepath.Join(dir, "state"), "SANDBOX_AUDIT_DB="+filepath.Join(dir, "audit.db"))
	t.Setenv("CODECAGE_URL", s.url)
	t.Setenv("CODECAGE_API_KEY", key)
	return s, key
}

// mustCLI runs a client command that must succeed and returns its stdout.
func mustCLI(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, stdin, args...)
	if code != exitOK {
		t.Fatalf("codecage %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// oneLine is a command's output that must be one line (an id).
func oneLine(t *testing.T, out string) string {
	t.Helper()
	id := strings.TrimSuffix(out, "\n")
	if id == "" || strings.ContainsAny(id, "\n \t") {
		t.Fatalf("want one id on one line, got %q", out)
	}
	return id
}

// restState is a session's state as the REST API reports it, judged
// without the client.
func restState(t *testing.T, s *server, key, id string) (int, string) {
	t.Helper()
	code, info := call(t, "GET", s.url+"/sessions/"+id, key, nil)
	st, _ := info["state"].(string)
	return code, st
}

// TestSessionsCLI drives a real server through `codecage sessions` and
// `codecage snapshots`: create, exec, pause, resume, snapshot, a session
// from the snapshot, fork, list, close, rm; each effect checked through
// the REST API as well as in the client's output.
func TestSessionsCLI(t *testing.T) {
	s, key := sessionsServer(t)

	id := oneLine(t, mustCLI(t, "", "sessions", "create"))
	if out := mustCLI(t, "", "sessions", "exec", id, "x = 41"); out != "" {
		t.Errorf("exec x = 41 printed %q", out)
	}
	if out := mustCLI(t, "", "sessions", "pause", id); out != id+" paused\n" {
		t.Errorf("pause printed %q", out)
	}
	if code, st := restState(t, s, key, id); code != 200 || st != "paused" {
		t.Fatalf("after sessions pause, REST says %d %q", code, st)
	}
	if out := mustCLI(t, "", "sessions", "show", id); !strings.Contains(out, "state:") || !strings.Contains(out, "paused") || !strings.Contains(out, id) {
		t.Errorf("show of a paused session:\n%s", out)
	}
	if out := mustCLI(t, "", "sessions", "resume", id); out != id+" running\n" {
		t.Errorf("resume printed %q", out)
	}
	if code, st := restState(t, s, key, id); code != 200 || st != "running" {
		t.Fatalf("after sessions resume, REST says %d %q", code, st)
	}
	if out := mustCLI(t, "", "sessions", "exec", id, "x + 1"); out != "42\n" {
		t.Fatalf("exec x + 1 after pause and resume: %q", out)
	}
	// Its own egress rules: a deny alone is taken without the network
	// profile (it grants nothing), an allow is not; the park below keeps
	// the deny.
	if out := mustCLI(t, "", "sessions", "network", "--deny-out", "0.0.0.0/0", "--deny-out", "10.1.2.3/32", id); out != "allow_out: \ndeny_out: 0.0.0.0/0 10.1.2.3\n" {
		t.Errorf("sessions network --deny-out printed %q", out)
	}
	if code, _, errOut := cli(t, "", "sessions", "network", "--allow-out", "api.example.com", id); code != exitRefused || !strings.Contains(errOut, "SANDBOX_ENABLE_NETWORK") {
		t.Errorf("sessions network --allow-out without network: exit %d, %q", code, errOut)
	}
	// Parked: written to the store, its sandbox gone; the next exec
	// (auto resume) brings it back.
	if out := mustCLI(t, "", "sessions", "pause", "--park", id); out != id+" paused\n" {
		t.Errorf("pause --park printed %q", out)
	}
	if code, st := restState(t, s, key, id); code != 200 || st != "paused" {
		t.Fatalf("after sessions pause --park, REST says %d %q", code, st)
	}
	if out := mustCLI(t, "", "sessions", "exec", id, "x + 2"); out != "43\n" {
		t.Fatalf("exec x + 2 after a park: %q", out)
	}
	if code, info := call(t, "GET", s.url+"/sessions/"+id, key, nil); code != 200 || fmt.Sprint(info["network"]) != "map[deny_out:[0.0.0.0/0 10.1.2.3]]" {
		t.Errorf("after a park, the session's network: %d %v", code, info["network"])
	}
	// The code from standard input and from a file.
	if out := mustCLI(t, "print(x * 2)", "sessions", "exec", id, "-"); out != "82\n" {
		t.Errorf("exec from stdin: %q", out)
	}
	f := filepath.Join(t.TempDir(), "code.py")
	if err := os.WriteFile(f, []byte("y = x - 1\nprint(y)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustCLI(t, "", "sessions", "exec", id, "--file", f); out != "40\n" {
		t.Errorf("exec --file: %q", out)
	}
	// A failing run is the code's failure (1), with its traceback.
	if code, _, errOut := cli(t, "", "sessions", "exec", id, "1/0"); code != exitFailure || !strings.Contains(errOut, "ZeroDivisionError") {
		t.Errorf("exec 1/0: exit %d, stderr %q", code, errOut)
	}
	// --json is the server's result object.
	var res map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, "", "sessions", "exec", "--json", id, "x")), &res); err != nil || res["result"] != float64(41) || res["success"] != true {
		t.Errorf("exec --json: %v %v", res, err)
	}

	// Its log: the failing run at warn, one line per entry, its fields
	// quoted; --json is REST's answer.
	logs := mustCLI(t, "", "sessions", "logs", "--level", "warn", id)
	if !strings.Contains(logs, " warn  execute: error ") || !strings.Contains(logs, `detail="ZeroDivisionError: division by zero"`) || strings.Contains(logs, " info ") {
		t.Errorf("sessions logs --level warn:\n%s", logs)
	}
	var logJSON struct {
		Logs []map[string]any `json:"logs"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "", "sessions", "logs", "--json", "--newest-first", "--limit", "1", id)), &logJSON); err != nil || len(logJSON.Logs) != 1 {
		t.Errorf("sessions logs --json --limit 1: %v %v", logJSON, err)
	}

	snap := oneLine(t, mustCLI(t, "", "sessions", "snapshot", id, "--name", "cli-snap"))
	out := mustCLI(t, "", "snapshots", "list")
	if !strings.Contains(out, snap) || !strings.Contains(out, "cli-snap") || !strings.Contains(out, id) {
		t.Errorf("snapshots list does not show %s (cli-snap, of %s):\n%s", snap, id, out)
	}
	var listed struct {
		Snapshots []struct {
			ID   string `json:"snapshot_id"`
			Name string `json:"name"`
		} `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "", "snapshots", "list", "--json", "--name", "cli-snap")), &listed); err != nil ||
		len(listed.Snapshots) != 1 || listed.Snapshots[0].ID != snap {
		t.Errorf("snapshots list --json --name cli-snap: %+v %v", listed, err)
	}

	from := oneLine(t, mustCLI(t, "", "sessions", "create", "--from-snapshot", snap))
	if out := mustCLI(t, "", "sessions", "exec", from, "x + 1"); out != "42\n" {
		t.Errorf("a session from the snapshot: x + 1 gives %q", out)
	}

	forks := strings.Split(strings.TrimSuffix(mustCLI(t, "", "sessions", "fork", id, "--count", "2"), "\n"), "\n")
	if len(forks) != 2 || forks[0] == forks[1] || forks[0] == id || forks[1] == id {
		t.Fatalf("fork --count 2 printed %q", forks)
	}
	for i, fid := range forks {
		if code, st := restState(t, s, key, fid); code != 200 || st != "running" {
			t.Errorf("fork copy %s: REST says %d %q", fid, code, st)
		}
		mustCLI(t, "", "sessions", "exec", fid, "x = x + "+string(rune('1'+i)))
	}
	// Each copy diverged on its own; the original kept its x.
	for i, fid := range forks {
		if out := mustCLI(t, "", "sessions", "exec", fid, "x"); out != []string{"42\n", "43\n"}[i] {
			t.Errorf("fork copy %d: x is %q", i, out)
		}
	}
	if out := mustCLI(t, "", "sessions", "exec", id, "x"); out != "41\n" {
		t.Errorf("the forked session's x: %q", out)
	}

	out = mustCLI(t, "", "sessions", "list")
	for _, want := range append([]string{id, from}, forks...) {
		if !strings.Contains(out, want) {
			t.Errorf("sessions list lacks %s:\n%s", want, out)
		}
	}
	if out := mustCLI(t, "", "sessions", "close", id); out != id+" closed\n" {
		t.Errorf("close printed %q", out)
	}
	if code, _ := restState(t, s, key, id); code != 404 {
		t.Errorf("after sessions close, REST GET says %d", code)
	}
	// A closed session is the server's error, with its kind, exit 4.
	if code, _, errOut := cli(t, "", "sessions", "show", id); code != exitRefused || !strings.Contains(errOut, "session_not_found") {
		t.Errorf("show of a closed session: exit %d, %q", code, errOut)
	}

	if out := mustCLI(t, "", "snapshots", "rm", snap); out != snap+" removed\n" {
		t.Errorf("snapshots rm printed %q", out)
	}
	if code, list := call(t, "GET", s.url+"/snapshots", key, nil); code != 200 || strings.Contains(toJSON(list), snap) {
		t.Errorf("after snapshots rm, REST lists: %d %v", code, list)
	}
	code, jsonOut, errOut := cli(t, "", "snapshots", "rm", "--json", snap)
	if code != exitRefused || !strings.Contains(errOut, "snapshot_not_found") || !strings.Contains(jsonOut, `"kind": "snapshot_not_found"`) {
		t.Errorf("rm of a removed snapshot: exit %d\nstdout %q\nstderr %q", code, jsonOut, errOut)
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestSessionsCLILifetimePause: --lifetime with --on-timeout pause pauses
// the session at its end; with --manual-resume a call on it is refused
// (the server's session_paused) until "sessions resume".
func TestSessionsCLILifetimePause(t *testing.T) {
	s, key := sessionsServer(t)
	id := oneLine(t, mustCLI(t, "", "sessions", "create", "--lifetime", "1s", "--on-timeout", "pause", "--manual-resume"))
	mustCLI(t, "", "sessions", "exec", id, "x = 41")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, st := restState(t, s, key, id); st == "paused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not paused 20 s after a lifetime of 1 s: %s", mustCLI(t, "", "sessions", "show", id))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, _, errOut := cli(t, "", "sessions", "exec", id, "x"); code != exitRefused || !strings.Contains(errOut, "session_paused") {
		t.Errorf("exec on a manually resumed paused session: exit %d, %q", code, errOut)
	}
	mustCLI(t, "", "sessions", "resume", id)
	if out := mustCLI(t, "", "sessions", "exec", id, "x + 1"); out != "42\n" {
		t.Errorf("after resume: %q", out)
	}
}

// TestSessionsCLIErrors: a wrong or missing key is the server's
// unauthorized (exit 4); a server that is not there, or not codecage, is
// a plain sentence (exit 3), never a dial error's dump; bad usage is 2
// before any call.
func TestSessionsCLIErrors(t *testing.T) {
	_, key := sessionsServer(t)

	code, _, errOut := cli(t, "", "sessions", "list", "--api-key", "wrong-key")
	if code != exitRefused || !strings.Contains(errOut, "unauthorized: the API key is not valid") {
		t.Errorf("wrong key: exit %d, %q", code, errOut)
	}
	t.Setenv("CODECAGE_API_KEY", "")
	code, _, errOut = cli(t, "", "snapshots", "list")
	if code != exitRefused || !strings.Contains(errOut, "unauthorized: this server needs an API key") {
		t.Errorf("no key: exit %d, %q", code, errOut)
	}
	// The server judges what it judges: on_timeout sleep is its invalid_request.
	code, _, errOut = cli(t, "", "sessions", "create", "--api-key", key, "--on-timeout", "sleep")
	if code != exitRefused || !strings.Contains(errOut, "invalid_request") {
		t.Errorf("on-timeout sleep: exit %d, %q", code, errOut)
	}

	// A port where nothing listens.
	code, _, errOut = cli(t, "", "sessions", "list", "--url", "http://127.0.0.1:1")
	if code != exitInternal || !strings.Contains(errOut, "cannot reach a codecage server at http://127.0.0.1:1: connection refused") ||
		strings.Contains(errOut, "dial tcp") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("server down: exit %d, %q", code, errOut)
	}
	// CODECAGE_URL is read the same way.
	t.Setenv("CODECAGE_URL", "http://127.0.0.1:1/")
	if code, _, errOut = cli(t, "", "snapshots", "rm", "x"); code != exitInternal || !strings.Contains(errOut, "connection refused") {
		t.Errorf("CODECAGE_URL down: exit %d, %q", code, errOut)
	}
	// Something that answers, but is no codecage server.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>nope</html>", http.StatusNotFound)
	}))
	defer other.Close()
	code, _, errOut = cli(t, "", "sessions", "show", "abc", "--url", other.URL)
	if code != exitInternal || !strings.Contains(errOut, "not a codecage answer") {
		t.Errorf("not codecage: exit %d, %q", code, errOut)
	}

	for _, args := range [][]string{
		{"sessions"},
		{"sessions", "bogus"},
		{"sessions", "exec"},
		{"sessions", "show"},
		{"sessions", "show", "a", "b"},
		{"sessions", "pause", "a", "--no-such-flag"},
		{"sessions", "fork", "a", "--count", "abc"},
		{"sessions", "create", "--lifetime", "soon"},
		{"sessions", "create", "extra"},
		{"sessions", "exec", "a", "x", "--file", "f.py"},
		{"sessions", "exec", "a", "--file", filepath.Join(t.TempDir(), "missing.py")},
		{"sessions", "list", "--url", "ftp://host"},
		{"sessions", "list", "--url", "not a url"},
		{"sessions", "close", ""},
		{"snapshots"},
		{"snapshots", "rm"},
		{"snapshots", "list", "extra"},
		{"snapshots", "gc", "extra"},
	} {
		// CODECAGE_URL names a port where nothing listens: a usage error
		// that reached for a server would be exit 3.
		code, out, errOut := cli(t, "", args...)
		if code != exitUsage || out != "" || errOut == "" {
			t.Errorf("codecage %q: exit %d (want %d), stdout %q, stderr %q", args, code, exitUsage, out, errOut)
		}
	}
}
