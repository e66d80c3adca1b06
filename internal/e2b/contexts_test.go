package e2b_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
)

type listedContext struct{ ID, Language, Cwd string }

func (b *box) contexts() []listedContext {
	b.t.Helper()
	status, raw := b.daemon("GET", "49999", "/contexts", "")
	var out []listedContext
	if status != 200 || json.Unmarshal([]byte(raw), &out) != nil {
		b.t.Fatalf("GET /contexts: %d %s", status, raw)
	}
	return out
}

var uuidShape = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// GET /contexts lists E2B's default contexts (python, then javascript when
// that kernel runs) with kernel-id-shaped ids, then those created, in order;
// a default context is the state runs with its language use.
func TestContextsListTheLanguageDefaults(t *testing.T) {
	srv, _ := newServerWith(t, func(c *config.Config) { c.Kernels = []string{"javascript", "typescript", "bash"} })
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	first := b.contexts()
	if len(first) != 2 || first[0].Language != "python" || first[1].Language != "javascript" {
		t.Fatalf("defaults: %+v", first)
	}
	for _, c := range first {
		if !uuidShape.MatchString(c.ID) || c.Cwd != "/home/user" {
			t.Fatalf("default context %+v: want a UUID id and cwd /home/user", c)
		}
	}
	if again := b.contexts(); again[0] != first[0] || again[1] != first[1] {
		t.Fatalf("the defaults changed: %+v then %+v", first, again)
	}
	// The javascript default is the state language=javascript runs use.
	if status, out := b.daemon("POST", "49999", "/execute", `{"code": "var shared = 6*7", "language": "javascript"}`); status != 200 || strings.Contains(out, `"type":"error"`) {
		t.Fatalf("js run: %d %s", status, out)
	}
	b.mustRunIn(first[1].ID, "shared", `42`)
	b.mustRun("py_only = 1")
	b.mustRunIn(first[0].ID, "py_only + 1", `"text":"2"`)
	b.mustRunIn("default", "py_only + 2", `"text":"3"`)

	status, got := call(t, "POST", srv.URL+"/contexts", `{"language": "python", "cwd": "/tmp"}`, map[string]string{"E2b-Sandbox-Id": b.id, "E2b-Sandbox-Port": "49999", "X-Access-Token": b.token})
	made := listedContext{ID: fmt.Sprint(got["id"]), Language: fmt.Sprint(got["language"]), Cwd: fmt.Sprint(got["cwd"])}
	if status != 200 || !uuidShape.MatchString(made.ID) || made.Cwd != "/tmp" {
		t.Fatalf("create: %d %v", status, got)
	}
	// A run in bash makes its default, listed after what came before.
	if status, out := b.daemon("POST", "49999", "/execute", `{"code": "echo hi", "language": "bash"}`); status != 200 || !strings.Contains(out, "hi") {
		t.Fatalf("bash run: %d %s", status, out)
	}
	all := b.contexts()
	if len(all) != 4 || all[0] != first[0] || all[1] != first[1] || all[2] != made || all[3].Language != "bash" {
		t.Fatalf("after create and a bash run: %+v", all)
	}
}

// TestContextsWithoutJavaScript: a server whose kernels leave javascript
// out lists only the python default.
func TestContextsWithoutJavaScript(t *testing.T) {
	srv, _ := newServerWith(t, func(c *config.Config) { c.Kernels = nil })
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	if got := b.contexts(); len(got) != 1 || got[0].Language != "python" {
		t.Fatalf("contexts: %+v", got)
	}
}

// A language no kernel here runs (E2B's r and java), or one the operator
// did not enable, is 404 naming the language and the kernels that run,
// for runCode and for a new context alike: the code-interpreter SDK
// passes a 404's text on as its NotFoundError (any other status but 502
// as a bare status line). Was: 500.
func TestUnsupportedLanguageIsNotFoundNamingTheKernels(t *testing.T) {
	srv, _ := newServerWith(t, func(c *config.Config) { c.Kernels = []string{"javascript", "typescript", "bash"} })
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	for _, lang := range []string{"r", "java"} {
		for _, call := range []struct{ path, body string }{
			{"/execute", `{"code": "1", "language": "` + lang + `"}`},
			{"/contexts", `{"language": "` + lang + `"}`},
		} {
			status, out := b.daemon("POST", "49999", call.path, call.body)
			if status != 404 || !strings.Contains(out, `"`+lang+`"`) || !strings.Contains(out, "python, javascript, typescript, bash") {
				t.Errorf("%s %s: %d %q, want 404 naming %s and the kernels", call.path, call.body, status, out, lang)
			}
		}
	}
	b.mustRun("1 + 1", "2") // the sandbox is none the worse

	srv, _ = newServerWith(t, func(c *config.Config) { c.Kernels = []string{"bash"} })
	b = createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	status, out := b.daemon("POST", "49999", "/execute", `{"code": "1", "language": "js"}`)
	if status != 404 || !strings.Contains(out, "javascript kernel is not enabled") || !strings.Contains(out, "SANDBOX_KERNELS") || !strings.Contains(out, "runs python, bash") {
		t.Errorf("a kernel not enabled: %d %q", status, out)
	}
}

// mustRunIn runs code in context id and fails unless the answer has want.
func (b *box) mustRunIn(id, code, want string) {
	b.t.Helper()
	body, _ := json.Marshal(map[string]string{"code": code, "context_id": id})
	status, out := b.daemon("POST", "49999", "/execute", string(body))
	if status != 200 || !strings.Contains(out, want) || strings.Contains(out, `"type":"error"`) {
		b.t.Fatalf("%s in context %s: %d %s, want %q", code, id, status, out, want)
	}
}
