package e2b_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
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

// Removing a path that is not there succeeds, as envd's; a path of the
// read-only system tree is still refused.
func TestRemoveMissingPathSucceeds(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	for _, p := range []string{"/home/user/nope", "/home/user/no/such/dir"} {
		if status, out := b.envd("/filesystem.Filesystem/Remove", `{"path": "`+p+`"}`); status != 200 {
			t.Errorf("remove %s: %d %v", p, status, out)
		}
	}
	if status, out := b.envd("/filesystem.Filesystem/Remove", `{"path": "/usr/bin/env"}`); status == 200 {
		t.Errorf("remove /usr/bin/env: %d %v", status, out)
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

// resultLines are the interpreter's answer lines of one type.
func resultLines(t *testing.T, out, typ string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("answer line %q: %v", l, err)
		}
		if m["type"] == typ {
			lines = append(lines, m)
		}
	}
	return lines
}

// A string result's text loses one pair of quotes, as E2B's Result does;
// other results keep theirs.
func TestStringResultTextIsUnquoted(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	for code, want := range map[string]string{
		`"hello"`:   "hello",
		`"it's"`:    "it's",
		`'a' + 'b'`: "ab",
		`["x"]`:     "['x']",
		`42`:        "42",
		`""`:        "",
	} {
		status, out := b.run(code)
		res := resultLines(t, out, "result")
		if status != 200 || len(res) != 1 || res[0]["text"] != want {
			t.Errorf("%s: %d %s, want the text %q", code, status, out, want)
		}
	}
}

// A cell whose every line is indented the same runs, as in E2B's kernel
// (IPython's leading_indent); a cell indented unevenly is still an
// IndentationError.
func TestIndentedCellRuns(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	b.mustRun("\n    x = 1\n\n    if x:\n        y = x + 1\n    y * 21\n", `"text":"42"`)
	b.mustRun("\tz = 2\n\tz", `"text":"2"`)
	status, out := b.run("    a = 1\n  b = 2\n")
	if errs := resultLines(t, out, "error"); status != 200 || len(errs) != 1 || errs[0]["name"] != "IndentationError" {
		t.Errorf("an uneven cell: %d %s", status, out)
	}
}

// Image.show() of a PIL image, and Image.save() to a file name, are
// display results (png), as with E2B's PIL hooks; the image is the one
// shown.
func TestPILShowIsADisplayResult(t *testing.T) {
	srv, _ := newServerWith(t, func(c *config.Config) { c.EnableDataScience = true })
	b := createBox(t, srv, `{"templateID": "data_science", "timeout": 60}`)
	status, out := b.run("from PIL import Image\nImage.new('RGB', (3, 2), 'red').show()\n")
	res := resultLines(t, out, "result")
	if status != 200 || len(res) != 1 || res[0]["is_main_result"] != false {
		t.Fatalf("show(): %d %.600s", status, out)
	}
	raw, err := base64.StdEncoding.DecodeString(res[0]["png"].(string))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if sz := img.Bounds().Size(); sz.X != 3 || sz.Y != 2 {
		t.Fatalf("the image is %v, want 3x2", sz)
	}
	if r, g, _, _ := img.At(1, 1).RGBA(); r>>8 != 255 || g != 0 {
		t.Fatalf("the image's pixel is %v, want red", img.At(1, 1))
	}
	// Saved to a file name, an image is displayed too (E2B's hook); saved
	// to a stream, it is not.
	status, out = b.run("import io\nimg = Image.new('RGB', (4, 4))\nimg.save('/tmp/x.png')\nimg.save(io.BytesIO(), 'PNG')\n")
	if res := resultLines(t, out, "result"); status != 200 || len(res) != 1 || res[0]["png"] == nil {
		t.Fatalf("save(): %d %.600s", status, out)
	}
	// A run that shows nothing gives no image (nothing left from before).
	if _, out := b.run("1"); len(resultLines(t, out, "result")) != 1 {
		t.Fatalf("the next run: %s", out)
	}
}

// signURL signs a /files URL as the SDK's downloadUrl and uploadUrl do,
// with the sandbox's access token; exp "" is no expiration.
func signURL(base, path, op, token, exp string) string {
	payload := path + ":" + op + "::" + token
	if exp != "" {
		payload += ":" + exp
	}
	sum := sha256.Sum256([]byte(payload))
	u := base + "/files?path=" + url.QueryEscape(path) + "&signature=v1_" + url.QueryEscape(strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "="))
	if exp != "" {
		u += "&signature_expiration=" + exp
	}
	return u
}

func fetchURL(t *testing.T, method, u, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if method == "POST" {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// A signed URL works on its own, without E2b-Sandbox-Id (E2B's "test
// access file with signing"): the server finds the sandbox from the
// signature. Each key's sandboxes hold the same path with different
// contents: every URL reads its own sandbox's; an expired signature is
// envd's 401, a tampered one reads nothing.
func TestSignedURLFindsItsSandbox(t *testing.T) {
	srv, _ := newServer(t)
	alice := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	alice2 := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	status, created := call(t, "POST", srv.URL+"/v2/sandboxes", `{"templateID": "base", "timeout": 60}`, map[string]string{"X-API-KEY": bobKey})
	if status != 201 {
		t.Fatalf("bob's create: %d %v", status, created)
	}
	bob := &box{t: t, srv: srv, id: created["sandboxID"].(string), token: created["envdAccessToken"].(string)}
	t.Cleanup(func() { call(t, "DELETE", srv.URL+"/sandboxes/"+bob.id, "", map[string]string{"X-API-KEY": bobKey}) })
	const p = "/home/user/hello.txt"
	for _, b := range []*box{alice, alice2, bob} {
		if status, body := fetchURL(t, "POST", signURL(srv.URL, p, "write", b.token, ""), "from "+b.id); status != 200 {
			t.Fatalf("signed upload to %s: %d %s", b.id, status, body)
		}
	}
	for _, b := range []*box{alice, alice2, bob} {
		if status, body := fetchURL(t, "GET", signURL(srv.URL, p, "read", b.token, ""), ""); status != 200 || body != "from "+b.id {
			t.Errorf("signed download of %s: %d %q", b.id, status, body)
		}
	}
	later := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	if status, body := fetchURL(t, "GET", signURL(srv.URL, p, "read", bob.token, later), ""); status != 200 || body != "from "+bob.id {
		t.Errorf("an unexpired signature: %d %q", status, body)
	}
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	status, body := fetchURL(t, "GET", signURL(srv.URL, p, "read", alice.token, past), "")
	if status != 401 || !strings.Contains(body, "signature is already expired") {
		t.Errorf("an expired signature: %d %s", status, body)
	}
	// The same with the sandbox named: envd's answer too.
	req, _ := http.NewRequest("GET", signURL(srv.URL, p, "read", alice.token, past), nil)
	req.Header.Set("E2b-Sandbox-Id", alice.id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("an expired signature with the sandbox named: %v %v", resp, err)
	}
	for name, u := range map[string]string{
		"a read signature used to write": signURL(srv.URL, p, "read", alice.token, ""),
		"another path":                   strings.Replace(signURL(srv.URL, p, "read", alice.token, ""), "hello", "other", 1),
		"a made-up token":                signURL(srv.URL, p, "read", "6b65793a616c696365."+strings.Repeat("0", 64), ""),
		"bob's id with alice's owner":    signURL(srv.URL, p, "read", alice.token[:strings.Index(alice.token, ".")]+bob.token[strings.Index(bob.token, "."):], ""),
	} {
		method := "GET"
		if strings.HasPrefix(name, "a read") {
			method = "POST"
		}
		if status, body := fetchURL(t, method, u, "x"); status != 401 || strings.Contains(body, "from ") {
			t.Errorf("%s: %d %s", name, status, body)
		}
	}
}

// Sandbox.list({query: {startedAfter}}) lists the sandboxes started at or
// after the time (E2B's ListSandboxes startedAfter); a bad time is 400.
func TestListStartedAfter(t *testing.T) {
	srv, _ := newServer(t)
	tag := "after-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	body := `{"timeout": 60, "metadata": {"t": "` + tag + `"}}`
	first := createBox(t, srv, body)
	time.Sleep(20 * time.Millisecond)
	second := createBox(t, srv, body)
	started := second.info()["startedAt"].(string)
	md := "metadata=" + url.QueryEscape("t="+tag)
	for q, want := range map[string][]string{
		"": {second.id, first.id},
		"&startedAfter=" + url.QueryEscape(started):                                              {second.id},
		"&startedAfter=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)): nil,
	} {
		status, items, _ := ctlList(t, srv, "/v2/sandboxes?"+md+q)
		if got := ids(items, "sandboxID"); status != 200 || !slices.Equal(got, want) {
			t.Errorf("%q: %d %v, want %v", q, status, got, want)
		}
	}
	if status, body := ctl(t, srv, "GET", "/v2/sandboxes?startedAfter=yesterday", ""); status != 400 || !strings.Contains(body["message"].(string), "RFC 3339") {
		t.Errorf("a bad startedAfter: %d %v", status, body)
	}
}
