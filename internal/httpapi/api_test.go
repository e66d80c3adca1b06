package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
)

type result struct {
	Success     bool            `json:"success"`
	ExecutionID string          `json:"execution_id"`
	Stdout      string          `json:"stdout"`
	Stderr      string          `json:"stderr"`
	Result      json.RawMessage `json:"result"`
	Limit       *string         `json:"limit"`
	Error       *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	Backend string `json:"backend"`
}

func TestOpenAPIDocumentCoversEveryRoute(t *testing.T) {
	ts := startServer(t, "", nil)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Info    struct{ Title, Version string }       `json:"info"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
		Comps   struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	resp := ts.call(t, "GET", "/openapi.json", "", nil, &doc)
	if resp.StatusCode != 200 || !strings.HasPrefix(doc.OpenAPI, "3.1") || doc.Info.Title != "codecage" {
		t.Fatalf("status %d, openapi %q, info %+v", resp.StatusCode, doc.OpenAPI, doc.Info)
	}
	want := map[string][]string{
		"/execute": {"post"}, "/validate": {"post"}, "/commands": {"post"}, "/pip_install": {"post"}, "/tools": {"get"}, "/info": {"get"}, "/health": {"get"}, "/ready": {"get"},
		"/sessions": {"get", "post"}, "/sessions/{id}": {"delete", "get"}, "/sessions/{id}/restart": {"post"}, "/sessions/{id}/metrics": {"get"}, "/sessions/{id}/logs": {"get"}, "/sessions/{id}/network": {"put"},
		"/sessions/{id}/pause": {"post"}, "/sessions/{id}/resume": {"post"}, "/sessions/{id}/snapshots": {"post"}, "/sessions/{id}/fork": {"post"},
		"/snapshots": {"get"}, "/snapshots/{id}": {"delete"},
		"/secrets": {"get", "post"}, "/secrets/{name}": {"delete"}, "/sessions/{id}/egress_credentials": {"put"},
		"/environments": {"get", "post"}, "/environments/{name}": {"delete", "get"}, "/environments/gc": {"post"},
		"/sessions/{id}/execute": {"post"}, "/sessions/{id}/files": {"get"}, "/sessions/{id}/files/content": {"delete", "get", "put"}, "/sessions/{id}/files/raw": {"get"},
	}
	for path, methods := range want {
		ops, ok := doc.Paths[path]
		if !ok {
			t.Errorf("path %s missing from the document", path)
			continue
		}
		for _, m := range methods {
			if _, ok := ops[m]; !ok {
				t.Errorf("%s %s missing", m, path)
			}
		}
	}
	for path := range doc.Paths {
		if _, ok := want[path]; !ok {
			t.Errorf("undocumented path in test's list: %s", path)
		}
	}
	for _, name := range []string{"Result", "Problem", "ExecuteParams", "StreamLine"} {
		if _, ok := doc.Comps.Schemas[name]; !ok {
			t.Errorf("schema %s missing (have %v)", name, keys(doc.Comps.Schemas))
		}
	}
	// Every route the document names answers (not the mux's 404).
	for path, ops := range doc.Paths {
		for m := range ops {
			p := strings.ReplaceAll(path, "{id}", "nosuch")
			resp := ts.call(t, strings.ToUpper(m), p, "", "{}", nil)
			if resp.StatusCode == 404 {
				var pr problem
				_ = json.NewDecoder(resp.Body).Decode(&pr)
				if pr.Kind == "not_found" {
					t.Errorf("%s %s: documented but not routed", m, path)
				}
			}
		}
	}
	// The docs page is served from the binary.
	resp = ts.call(t, "GET", "/docs", "", nil, nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "/openapi.json") {
		t.Fatalf("/docs: %d %s", resp.StatusCode, body)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestExecute(t *testing.T) {
	ts := startServer(t, "", nil)
	var r result
	resp := ts.call(t, "POST", "/execute", "", map[string]any{"code": "print('hi')\n6*7"}, &r)
	if resp.StatusCode != 200 || !r.Success || r.Stdout != "hi\n" || string(r.Result) != "42" || r.ExecutionID == "" || r.Backend != "native" {
		t.Fatalf("status %d, result %+v", resp.StatusCode, r)
	}
	// A failing program is a result, not an HTTP error.
	r = result{}
	resp = ts.call(t, "POST", "/execute", "", map[string]any{"code": "1/0"}, &r)
	if resp.StatusCode != 200 || r.Success || r.Error == nil || r.Error.Type != "ZeroDivisionError" {
		t.Fatalf("status %d, result %+v", resp.StatusCode, r)
	}
	// Limits end runs and say so.
	r = result{}
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "while True: pass", "timeout": 0.5}, &r)
	if r.Success || r.Limit == nil || *r.Limit != "timeout" && *r.Limit != "cpu" {
		t.Fatalf("limit not reported: %+v", r)
	}
	// NUL bytes and non-ASCII text travel intact.
	r = result{}
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "s = 'a\\x00b é'\nprint(len(s), s.encode('utf-8').hex())"}, &r)
	if !r.Success || r.Stdout != "5 61006220c3a9\n" {
		t.Fatalf("nul: %+v", r)
	}
}

func TestUseContainer(t *testing.T) {
	ts := startServer(t, "", func(c *config.Config) { c.EnableContainerMode = true; c.GVisorPoolSize, c.GVisorDataPoolSize = 1, 0 })
	var r result
	resp := ts.call(t, "POST", "/execute", "", map[string]any{"code": "print('hi')\n6*7", "use_container": true}, &r)
	if resp.StatusCode != 200 || !r.Success || r.Stdout != "hi\n" || string(r.Result) != "42" || r.Backend != "gvisor" {
		t.Fatalf("status %d, result %+v", resp.StatusCode, r)
	}
	var se struct {
		ID      string `json:"session_id"`
		Backend string `json:"backend"`
	}
	if resp := ts.call(t, "POST", "/sessions", "", map[string]any{"use_container": true}, &se); resp.StatusCode != 201 || se.Backend != "gvisor" {
		t.Fatalf("create: %d %+v", resp.StatusCode, se)
	}
	r = result{}
	ts.call(t, "POST", "/sessions/"+se.ID+"/execute", "", map[string]any{"code": "x = 1\nx + 1"}, &r)
	if !r.Success || string(r.Result) != "2" || r.Backend != "gvisor" {
		t.Fatalf("session run: %+v", r)
	}
}

func TestExecuteErrors(t *testing.T) {
	ts := startServer(t, "", func(c *config.Config) { c.MaxBodySize = 4 << 10 })
	cases := []struct {
		name   string
		body   string
		status int
		kind   string
	}{
		{"malformed JSON", `{"code": `, 400, "invalid_request"},
		{"missing code", `{}`, 422, "invalid_request"},
		{"wrong type", `{"code": 5}`, 422, "invalid_request"},
		{"unknown profile", `{"code": "1", "profile": "nosuch"}`, 400, "invalid_request"},
		{"disabled profile", `{"code": "1", "profile": "data_science"}`, 400, "invalid_request"},
		{"absurd timeout", `{"code": "1", "timeout": 1e12}`, 400, "invalid_request"},
		{"absurd memory", `{"code": "1", "memory_limit": "1000t"}`, 400, "invalid_request"},
		{"bad memory", `{"code": "1", "memory_limit": "lots"}`, 400, "invalid_request"},
		{"container mode off", `{"code": "1", "use_container": true}`, 400, "invalid_request"},
		{"unknown session", `{"code": "1", "session_id": "snosuch"}`, 404, "session_not_found"},
		{"body over the limit", `{"code": "` + strings.Repeat("x", 8<<10) + `"}`, 413, "too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := ts.call(t, "POST", "/execute", "", c.body, nil)
			p := wantProblem(t, resp, c.status, c.kind)
			if p.Detail == "" {
				t.Fatalf("no detail: %+v", p)
			}
		})
	}
	// Text that is not valid Unicode is refused, naming the field, not
	// silently replaced (the code would fail as a puzzling SyntaxError).
	for body, want := range map[string]string{
		"{\"code\": \"print('\xff\xfe')\"}":                   "code is not valid UTF-8",
		`{"code": "print('\udc80')"}`:                         `code is not valid Unicode: an unpaired UTF-16 surrogate \udc80`,
		"{\"code\": \"1\", \"allowed_imports\": [\"m\xc3\"]}": "allowed_imports[0] is not valid UTF-8",
	} {
		p := wantProblem(t, ts.call(t, "POST", "/execute", "", body, nil), 400, "invalid_request")
		if !strings.Contains(p.Detail, want) {
			t.Errorf("%q: detail %q, want %q", body, p.Detail, want)
		}
	}
	p := wantProblem(t, ts.call(t, "PUT", "/sessions/snosuch/files/content", "", "{\"path\": \"a.txt\", \"content\": \"\x80\"}", nil), 400, "invalid_request")
	if !strings.Contains(p.Detail, "content is not valid UTF-8") || !strings.Contains(p.Detail, "base64") {
		t.Errorf("file content: %q", p.Detail)
	}
	// Valid UTF-8 passes untouched.
	var ok result
	ts.call(t, "POST", "/execute", "", `{"code": "s = 'h\u00e9llo \ud83d\ude00 ✓'\nlen(s)"}`, &ok)
	if !ok.Success || string(ok.Result) != "9" {
		t.Errorf("valid Unicode: %+v", ok)
	}
	var resp *http.Response
	// Unknown routes and methods are problems too.
	wantProblem(t, ts.call(t, "GET", "/nosuch", "", nil, nil), 404, "not_found")
	resp = ts.call(t, "GET", "/execute", "", nil, nil)
	if resp.StatusCode != 405 && resp.StatusCode != 404 {
		t.Fatalf("GET /execute: %d", resp.StatusCode)
	}
}

func TestValidateInfoHealthReady(t *testing.T) {
	ts := startServer(t, "", nil)
	var v struct {
		Validation struct {
			Valid  bool     `json:"valid"`
			Errors []string `json:"errors"`
		} `json:"validation"`
	}
	ts.call(t, "POST", "/validate", "", map[string]any{"code": "import socket"}, &v)
	if v.Validation.Valid || len(v.Validation.Errors) == 0 {
		t.Fatalf("validate: %+v", v)
	}
	wantProblem(t, ts.call(t, "POST", "/validate", "", `{"code": 1}`, nil), 422, "invalid_request")
	var info struct {
		SecurityProfiles map[string]any `json:"security_profiles"`
	}
	ts.call(t, "GET", "/info", "", nil, &info)
	if _, ok := info.SecurityProfiles["basic"]; !ok {
		t.Fatalf("info: %+v", info)
	}
	var h struct{ Status, Version string }
	if resp := ts.call(t, "GET", "/health", "", nil, &h); resp.StatusCode != 200 || h.Status != "ok" {
		t.Fatalf("health: %d %+v", resp.StatusCode, h)
	}
	var ready struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := ts.call(t, "GET", "/ready", "", nil, &ready)
		if resp.StatusCode == 200 && ready.Ready && ready.Checks["pool_basic"] == "ok" && ready.Checks["audit_log"] == "ok" && ready.Checks["sandboxes"] == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %d %+v", resp.StatusCode, ready)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestExecuteStream: with Accept: text/event-stream the lines arrive while
// the code still runs. The code waits for a file that the test writes only
// once it has received the first line, so a stream that held the lines
// back to the end would never finish.
func TestExecuteStream(t *testing.T) {
	ts := startServer(t, "", nil)
	var se struct {
		ID string `json:"session_id"`
	}
	if resp := ts.call(t, "POST", "/sessions", "", map[string]any{"profile": "basic"}, &se); resp.StatusCode != 201 {
		t.Fatalf("create session: %d", resp.StatusCode)
	}
	code := "import time\nprint('waiting', flush=True)\nfor _ in range(3000):\n    try:\n        open('/workspace/go').close(); break\n    except OSError:\n        time.sleep(0.01)\nelse:\n    raise SystemExit('never released')\nprint('released')\n'done'"
	body, _ := json.Marshal(map[string]any{"code": code, "timeout": 60})
	req, _ := http.NewRequest("POST", ts.URL+"/sessions/"+se.ID+"/execute", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	events := make(chan sseEvent, 16)
	go readEvents(resp.Body, events)
	first := <-events
	var line struct{ Stream, Line string }
	if err := json.Unmarshal([]byte(first.Data), &line); err != nil || first.Event != "stdout" || line.Line != "waiting" {
		t.Fatalf("first event %+v", first)
	}
	if r := ts.call(t, "PUT", "/sessions/"+se.ID+"/files/content", "", map[string]any{"path": "go", "content": ""}, nil); r.StatusCode != 200 {
		t.Fatalf("release: %d", r.StatusCode)
	}
	var got []sseEvent
	for ev := range events {
		got = append(got, ev)
	}
	if len(got) != 2 || got[0].Event != "stdout" || got[1].Event != "result" {
		t.Fatalf("events after release: %+v", got)
	}
	var r result
	if err := json.Unmarshal([]byte(got[1].Data), &r); err != nil || !r.Success || r.Stdout != "waiting\nreleased\n" || string(r.Result) != `"done"` {
		t.Fatalf("result %+v (%v)", r, err)
	}
	// Errors before the run are problems on the stream.
	req, _ = http.NewRequest("POST", ts.URL+"/execute", strings.NewReader(`{"code":"1","profile":"nosuch"}`))
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, resp2, 400, "invalid_request")
}

func TestSessionsAndFiles(t *testing.T) {
	ts := startServer(t, "", nil)
	var se struct {
		ID       string   `json:"session_id"`
		Profiles []string `json:"profiles"`
	}
	if resp := ts.call(t, "POST", "/sessions", "", map[string]any{}, &se); resp.StatusCode != 201 || se.ID == "" {
		t.Fatalf("create: %d %+v", resp.StatusCode, se)
	}
	base := "/sessions/" + se.ID
	var r result
	ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "x = 20"}, &r)
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "x + 1", "session_id": se.ID}, &r)
	if !r.Success || string(r.Result) != "21" {
		t.Fatalf("state did not persist: %+v", r)
	}
	var fi struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	}
	if resp := ts.call(t, "PUT", base+"/files/content", "", map[string]any{"path": "in/data.txt", "content": "aGVsbG8=", "encoding": "base64"}, &fi); resp.StatusCode != 200 || fi.Size != 5 {
		t.Fatalf("write: %d %+v", resp.StatusCode, fi)
	}
	r = result{}
	ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "open('in/data.txt').read().upper()"}, &r)
	if string(r.Result) != `"HELLO"` {
		t.Fatalf("code did not see the file: %+v", r)
	}
	var fc struct{ Path, Encoding, Content string }
	ts.call(t, "GET", base+"/files/content?path=in/data.txt", "", nil, &fc)
	if fc.Content != "hello" || fc.Encoding != "utf-8" {
		t.Fatalf("read: %+v", fc)
	}
	var list struct {
		Files []struct{ Path string } `json:"files"`
	}
	ts.call(t, "GET", base+"/files", "", nil, &list)
	if len(list.Files) != 2 {
		t.Fatalf("list: %+v", list)
	}
	wantProblem(t, ts.call(t, "GET", base+"/files/content?path=../../etc/passwd", "", nil, nil), 400, "bad_path")
	wantProblem(t, ts.call(t, "GET", base+"/files/content?path=nosuch", "", nil, nil), 404, "file_not_found")
	wantProblem(t, ts.call(t, "PUT", base+"/files/content", "", map[string]any{"path": "x", "content": "!", "encoding": "base64"}, nil), 400, "invalid_request")
	if resp := ts.call(t, "DELETE", base+"/files/content?path=in", "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	var all struct {
		Sessions []struct {
			ID string `json:"session_id"`
		} `json:"sessions"`
	}
	ts.call(t, "GET", "/sessions", "", nil, &all)
	if len(all.Sessions) != 1 || all.Sessions[0].ID != se.ID {
		t.Fatalf("list sessions: %+v", all)
	}
	if resp := ts.call(t, "POST", base+"/restart", "", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("restart: %d", resp.StatusCode)
	}
	r = result{}
	ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "'x' in dir()"}, &r)
	if string(r.Result) != "false" {
		t.Fatalf("restart kept variables: %+v", r)
	}
	if resp := ts.call(t, "DELETE", base, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("close: %d", resp.StatusCode)
	}
	wantProblem(t, ts.call(t, "GET", base, "", nil, nil), 404, "session_not_found")
	wantProblem(t, ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "1"}, nil), 404, "session_not_found")
}

// TestCurlStyleBody: curl -d sends JSON labelled as a form; it is read as
// JSON.
func TestCurlStyleBody(t *testing.T) {
	ts := startServer(t, "", nil)
	req, _ := http.NewRequest("POST", ts.URL+"/execute", strings.NewReader(`{"code":"print(2+2)"}`))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r result
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || r.Stdout != "4\n" {
		t.Fatalf("status %d, %+v, %v", resp.StatusCode, r, err)
	}
}

func TestCommands(t *testing.T) {
	ts := startServer(t, "", nil)
	type cmdResult struct {
		Success  bool    `json:"success"`
		ExitCode int     `json:"exit_code"`
		Stdout   string  `json:"stdout"`
		Stderr   string  `json:"stderr"`
		Error    *string `json:"error"`
		TimedOut bool    `json:"timed_out"`
	}
	var r cmdResult
	if resp := ts.call(t, "POST", "/commands", "", map[string]any{"command": "echo a b c | wc -w"}, &r); resp.StatusCode != 200 || !r.Success || r.Stdout != "3\n" {
		t.Fatalf("%d %+v", resp.StatusCode, r)
	}
	r = cmdResult{}
	ts.call(t, "POST", "/commands", "", map[string]any{"command": "curl http://example.com"}, &r)
	if r.Success || r.ExitCode != 127 || r.Error == nil || !strings.Contains(*r.Error, `"curl" is not allowed`) {
		t.Fatalf("not allowed: %+v", r)
	}
	wantProblem(t, ts.call(t, "POST", "/commands", "", map[string]any{"command": "true", "env": map[string]string{"LD_PRELOAD": "x"}}, nil), 400, "invalid_request")
	wantProblem(t, ts.call(t, "POST", "/commands", "", map[string]any{"command": "true", "session_id": "snosuch"}, nil), 404, "session_not_found")
	// In a session, with the file API and the interpreter.
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/sessions", "", map[string]any{}, &se)
	ts.call(t, "PUT", "/sessions/"+se.ID+"/files/content", "", map[string]any{"path": "in.txt", "content": "b\na\nc\n"}, nil)
	r = cmdResult{}
	ts.call(t, "POST", "/commands", "", map[string]any{"command": "sort in.txt > sorted.txt && head -1 sorted.txt", "session_id": se.ID}, &r)
	if !r.Success || r.Stdout != "a\n" {
		t.Fatalf("session command: %+v", r)
	}
	var fc struct{ Content string }
	ts.call(t, "GET", "/sessions/"+se.ID+"/files/content?path=sorted.txt", "", nil, &fc)
	if fc.Content != "a\nb\nc\n" {
		t.Fatalf("the command's file: %q", fc.Content)
	}
	// Streamed.
	req, _ := http.NewRequest("POST", ts.URL+"/commands", strings.NewReader(`{"command":"echo one; echo two >&2"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan sseEvent, 8)
	go readEvents(resp.Body, events)
	var kinds []string
	for ev := range events {
		kinds = append(kinds, ev.Event)
	}
	resp.Body.Close()
	if len(kinds) != 3 || kinds[2] != "result" {
		t.Fatalf("events %v", kinds)
	}
	found := false
	for _, ev := range ts.events(t) {
		if ev.Kind == "command" && ev.Code == "curl http://example.com" && len(ev.SecurityEvents) == 1 && ev.SecurityEvents[0] == "command_denied:curl" {
			found = true
		}
	}
	if !found {
		t.Fatal("the refused program is not in the audit log")
	}
}
