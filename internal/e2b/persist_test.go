package e2b_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
)

// box is an E2B sandbox as the tests reach it: the control plane with
// alice's key, its daemons with its access token.
type box struct {
	t         *testing.T
	srv       *httptest.Server
	id, token string
}

func ctl(t *testing.T, srv *httptest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	return call(t, method, srv.URL+path, body, map[string]string{"X-API-KEY": aliceKey})
}

// ctlList is a listing call: its items and its X-Next-Token.
func ctlList(t *testing.T, srv *httptest.Server, path string) (int, []map[string]any, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	req.Header.Set("X-API-KEY", aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out []map[string]any
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, raw)
		}
	}
	return resp.StatusCode, out, resp.Header.Get("X-Next-Token")
}

func createBox(t *testing.T, srv *httptest.Server, body string) *box {
	t.Helper()
	status, created := ctl(t, srv, "POST", "/v2/sandboxes", body)
	if status != 201 {
		t.Fatalf("create %s: %d %v", body, status, created)
	}
	b := &box{t: t, srv: srv, id: created["sandboxID"].(string), token: created["envdAccessToken"].(string)}
	t.Cleanup(func() { call(t, "DELETE", srv.URL+"/sandboxes/"+b.id, "", map[string]string{"X-API-KEY": aliceKey}) })
	return b
}

func (b *box) daemon(method, port, path, body string) (int, string) {
	b.t.Helper()
	status, out := call(b.t, method, b.srv.URL+path, body, map[string]string{"E2b-Sandbox-Id": b.id, "E2b-Sandbox-Port": port, "X-Access-Token": b.token})
	raw, _ := out["raw"].(string)
	return status, raw
}

func (b *box) health() int {
	b.t.Helper()
	status, _ := b.daemon("GET", "49983", "/health", "")
	return status
}

// run runs code in the sandbox's interpreter and returns its answer (the
// interpreter's stream of JSON lines).
func (b *box) run(code string) (int, string) {
	b.t.Helper()
	body, _ := json.Marshal(map[string]string{"code": code})
	return b.daemon("POST", "49999", "/execute", string(body))
}

// mustRun runs code and fails unless the answer has every one of want.
func (b *box) mustRun(code string, want ...string) {
	b.t.Helper()
	status, out := b.run(code)
	for _, w := range want {
		if status != 200 || !strings.Contains(out, w) {
			b.t.Fatalf("%s in %s: %d %s, want %q", code, b.id, status, out, w)
		}
	}
	if status != 200 || strings.Contains(out, `"type":"error"`) {
		b.t.Fatalf("%s in %s: %d %s", code, b.id, status, out)
	}
}

func (b *box) info() map[string]any {
	b.t.Helper()
	status, info := ctl(b.t, b.srv, "GET", "/sandboxes/"+b.id, "")
	if status != 200 {
		b.t.Fatalf("getInfo %s: %d %v", b.id, status, info)
	}
	return info
}

func endAt(t *testing.T, info map[string]any) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, info["endAt"].(string))
	if err != nil {
		t.Fatal(err)
	}
	return at
}

func ids(items []map[string]any, field string) []string {
	var out []string
	for _, it := range items {
		out = append(out, fmt.Sprint(it[field]))
	}
	return out
}

// Pause keeps the sandbox's variables, files and environment; its daemons
// look down (502) and a second pause is 409 until connect resumes it
// (201) under the same id and access token; a second connect is 200.
func TestPauseThenConnectResumes(t *testing.T) {
	srv, _ := newServerWith(t, func(c *config.Config) { c.EnableFilesystem = true }) // os.environ
	b := createBox(t, srv, `{"templateID": "filesystem", "timeout": 120, "envVars": {"TEST_VAR": "sfisback"}}`)
	b.mustRun("x = 41\nopen('/home/user/kept.txt', 'w').write('kept')")
	if got := b.info()["lifecycle"]; fmt.Sprint(got) != "map[autoResume:false onTimeout:kill]" {
		t.Errorf("lifecycle of a plain sandbox: %v", got)
	}

	if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/pause", "{}"); status != 204 {
		t.Fatalf("pause: %d %v", status, body)
	}
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/pause", "{}"); status != 409 || body["code"] != float64(409) {
		t.Errorf("a second pause: %d %v, want 409 with code 409", status, body)
	}
	if st := b.health(); st != 502 {
		t.Errorf("health of a paused sandbox: %d, want 502 (the SDK's isRunning false)", st)
	}
	if status, out := b.run("x"); status != 502 {
		t.Errorf("code in a paused sandbox: %d %s, want 502", status, out)
	}
	if st := b.info()["state"]; st != "paused" {
		t.Errorf("getInfo state %v, want paused", st)
	}
	if _, l, _ := ctlList(t, srv, "/v2/sandboxes?state=paused"); !slices.Contains(ids(l, "sandboxID"), b.id) || l[0]["state"] != "paused" {
		t.Errorf("state=paused lists %v", l)
	}
	if _, l, _ := ctlList(t, srv, "/v2/sandboxes?state=running"); slices.Contains(ids(l, "sandboxID"), b.id) {
		t.Errorf("state=running lists the paused sandbox: %v", l)
	}

	status, body := ctl(t, srv, "POST", "/v2/sandboxes/"+b.id+"/connect", `{"timeout": 60}`)
	if status != 201 || body["sandboxID"] != b.id || body["envdAccessToken"] != b.token {
		t.Fatalf("connect to a paused sandbox: %d %v, want 201 with the same id and token", status, body)
	}
	if st := b.health(); st != 204 {
		t.Errorf("health after resume: %d", st)
	}
	b.mustRun("import os\nprint(x, open('/home/user/kept.txt').read(), os.environ['TEST_VAR'])", "41 kept sfisback")
	if st := b.info()["state"]; st != "running" {
		t.Errorf("getInfo state after resume: %v", st)
	}
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/connect", `{"timeout": 60}`); status != 200 {
		t.Errorf("connect to a running sandbox: %d %v, want 200", status, body)
	}
}

// A paused sandbox can be killed; a killed one cannot be connected to,
// paused, snapshotted or forked (404, code 404).
func TestKillPausedSandbox(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"timeout": 60}`)
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/pause", `{"memory": true}`); status != 204 {
		t.Fatalf("pause: %d %v", status, body)
	}
	if status, body := ctl(t, srv, "DELETE", "/sandboxes/"+b.id, ""); status != 204 {
		t.Fatalf("kill a paused sandbox: %d %v", status, body)
	}
	for _, p := range []string{"/v2/sandboxes/" + b.id + "/connect", "/sandboxes/" + b.id + "/pause", "/sandboxes/" + b.id + "/snapshots", "/sandboxes/" + b.id + "/fork"} {
		if status, body := ctl(t, srv, "POST", p, "{}"); status != 404 || body["code"] != float64(404) {
			t.Errorf("POST %s of a killed sandbox: %d %v, want 404", p, status, body)
		}
	}
	if st := b.health(); st != 502 {
		t.Errorf("health of a killed sandbox: %d", st)
	}
}

// connect never shortens a running sandbox's life; it extends it when the
// timeout reaches past its end (issue #27 item 5).
func TestConnectExtendsNeverShortens(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"timeout": 300}`)
	before := endAt(t, b.info())
	if status, body := ctl(t, srv, "POST", "/v2/sandboxes/"+b.id+"/connect", `{"timeout": 10}`); status != 200 {
		t.Fatalf("connect: %d %v", status, body)
	}
	if got := endAt(t, b.info()); !got.Equal(before) {
		t.Errorf("connect with 10 s moved endAt %s -> %s", before, got)
	}
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/connect", `{"timeout": 600}`); status != 200 {
		t.Fatalf("connect v1: %d %v", status, body)
	}
	if got := endAt(t, b.info()); got.Before(before.Add(250 * time.Second)) {
		t.Errorf("connect with 600 s: endAt %s -> %s, want about 600 s from now", before, got)
	}
}

// refreshes (E2B's keep-alive) extends a sandbox's life, never shortens
// it; until now codecage answered 501.
func TestRefreshExtendsNeverShortens(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"timeout": 300}`)
	before := endAt(t, b.info())
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/refreshes", `{"duration": 5}`); status != 204 {
		t.Fatalf("refresh 5 s: %d %v", status, body)
	}
	if got := endAt(t, b.info()); !got.Equal(before) {
		t.Errorf("refresh with 5 s moved endAt %s -> %s", before, got)
	}
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/refreshes", `{"duration": 3600}`); status != 204 {
		t.Fatalf("refresh 3600 s: %d %v", status, body)
	}
	if got := endAt(t, b.info()); got.Before(before.Add(3000 * time.Second)) {
		t.Errorf("refresh with 3600 s: endAt %s -> %s, want about an hour from now", before, got)
	}
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/refreshes", `{"duration": 3601}`); status != 400 {
		t.Errorf("refresh 3601 s: %d %v, want 400", status, body)
	}
	if status, _ := ctl(t, srv, "POST", "/sandboxes/snope/refreshes", `{"duration": 10}`); status != 404 {
		t.Errorf("refresh of an unknown sandbox: %d, want 404", status)
	}
}

// A sandbox created with autoPause pauses at its timeout instead of
// ending; without autoResume traffic does not wake it, connect does.
func TestTimeoutPausesThenConnectWakes(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"timeout": 2, "autoPause": true, "autoResume": {"enabled": false}}`)
	if got := b.info()["lifecycle"]; fmt.Sprint(got) != "map[autoResume:false onTimeout:pause]" {
		t.Errorf("lifecycle: %v", got)
	}
	b.mustRun("x = 'still here'")
	deadline := time.Now().Add(20 * time.Second)
	for b.info()["state"] != "paused" {
		if time.Now().After(deadline) {
			t.Fatalf("not paused 20 s after a 2 s timeout: %v", b.info())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for range 3 {
		if st := b.health(); st != 502 {
			t.Fatalf("health of a sandbox paused at its timeout: %d, want 502 (no auto-resume)", st)
		}
	}
	if st := b.info()["state"]; st != "paused" {
		t.Fatalf("traffic woke a sandbox without autoResume: %v", st)
	}
	if status, body := ctl(t, srv, "POST", "/v2/sandboxes/"+b.id+"/connect", "{}"); status != 201 {
		t.Fatalf("connect: %d %v", status, body)
	}
	b.mustRun("print(x)", "still here")
	if end := endAt(t, b.info()); time.Until(end) < 250*time.Second {
		t.Errorf("a resumed sandbox ends at %s, want the default 300 s from now", end)
	}
}

// With autoResume, traffic to a paused sandbox wakes it.
func TestAutoResumeWakesOnTraffic(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"timeout": 60, "autoPause": true, "autoResume": {"enabled": true}}`)
	if got := b.info()["lifecycle"]; fmt.Sprint(got) != "map[autoResume:true onTimeout:pause]" {
		t.Errorf("lifecycle: %v", got)
	}
	b.mustRun("y = 5")
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/pause", "{}"); status != 204 {
		t.Fatalf("pause: %d %v", status, body)
	}
	if st := b.info()["state"]; st != "paused" {
		t.Fatalf("state after pause: %v", st)
	}
	b.mustRun("print(y * 2)", "10")
	if st := b.info()["state"]; st != "running" {
		t.Errorf("state after traffic woke it: %v", st)
	}
	if status, body := ctl(t, srv, "POST", "/v2/sandboxes", `{"autoResume": {"enabled": true}}`); status != 400 {
		t.Errorf("autoResume without autoPause: %d %v", status, body)
	}
}

// The listing is newest first by default (E2B's order), filtered by state,
// a page at a time.
func TestListNewestFirstByStateInPages(t *testing.T) {
	srv, _ := newServer(t)
	tag := fmt.Sprintf("list-%d", time.Now().UnixNano())
	var made []string
	for range 3 {
		made = append(made, createBox(t, srv, `{"timeout": 60, "metadata": {"t": "`+tag+`"}}`).id)
		time.Sleep(20 * time.Millisecond)
	}
	md := "metadata=" + url.QueryEscape("t="+tag)
	var paged []string
	token := ""
	for page := 0; ; page++ {
		path := "/v2/sandboxes?" + md + "&limit=1"
		if token != "" {
			path += "&nextToken=" + url.QueryEscape(token)
		}
		status, items, next := ctlList(t, srv, path)
		if status != 200 || len(items) != 1 || page > 3 {
			t.Fatalf("page %d: %d %v", page, status, items)
		}
		paged = append(paged, items[0]["sandboxID"].(string))
		if token = next; token == "" {
			break
		}
	}
	newest := slices.Clone(made)
	slices.Reverse(newest)
	if !slices.Equal(paged, newest) {
		t.Errorf("pages %v, want newest first %v", paged, newest)
	}
	if _, items, _ := ctlList(t, srv, "/v2/sandboxes?"+md+"&order=asc"); !slices.Equal(ids(items, "sandboxID"), made) {
		t.Errorf("order=asc: %v, want %v", ids(items, "sandboxID"), made)
	}
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+made[1]+"/pause", "{}"); status != 204 {
		t.Fatalf("pause: %d %v", status, body)
	}
	for q, want := range map[string][]string{
		"&state=paused":               {made[1]},
		"&state=running":              {made[2], made[0]},
		"&state=running,paused":       newest,
		"&state=running&state=paused": newest,
		"":                            newest,
	} {
		_, items, _ := ctlList(t, srv, "/v2/sandboxes?"+md+q)
		if !slices.Equal(ids(items, "sandboxID"), want) {
			t.Errorf("%q: %v, want %v", q, ids(items, "sandboxID"), want)
		}
	}
}

// A filesystem-only pause (memory false) and a connect that asks for a
// cold boot (memory false, the SDK's onResume 'reboot') both keep the
// files and start a fresh interpreter, as E2B's cold boot does.
func TestFilesystemOnlyPauseAndRebootKeepFiles(t *testing.T) {
	srv, _ := newServer(t)
	for name, tc := range map[string]struct{ pause, connect string }{
		"pause memory false":   {`{"memory": false}`, `{}`},
		"connect memory false": {`{}`, `{"memory": false}`},
	} {
		b := createBox(t, srv, `{"timeout": 60}`)
		b.mustRun("v = 'in memory'\nopen('/home/user/disk.txt', 'w').write('on disk')")
		if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/pause", tc.pause); status != 204 {
			t.Fatalf("%s: pause: %d %v", name, status, body)
		}
		if status, body := ctl(t, srv, "POST", "/v2/sandboxes/"+b.id+"/connect", tc.connect); status != 201 {
			t.Fatalf("%s: connect: %d %v", name, status, body)
		}
		b.mustRun("print(open('/home/user/disk.txt').read(), 'v' in globals())", "on disk False")
	}
}

// setTimeout(0) ends the timeout now: a sandbox with autoPause pauses (E2B's
// Python tests force the timeout action so), one without ends.
func TestSetTimeoutZeroActsNow(t *testing.T) {
	srv, _ := newServer(t)
	paused := createBox(t, srv, `{"timeout": 300, "autoPause": true}`)
	paused.mustRun("w = 'kept'")
	ended := createBox(t, srv, `{"timeout": 300}`)
	for _, b := range []*box{paused, ended} {
		if status, body := ctl(t, srv, "POST", "/sandboxes/"+b.id+"/timeout", `{"timeout": 0}`); status != 204 {
			t.Fatalf("setTimeout 0: %d %v", status, body)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for paused.info()["state"] != "paused" {
		if time.Now().After(deadline) {
			t.Fatalf("not paused after setTimeout 0: %v", paused.info())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		status, _ := ctl(t, srv, "GET", "/sandboxes/"+ended.id, "")
		if status == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ended after setTimeout 0: %d", status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status, body := ctl(t, srv, "POST", "/v2/sandboxes/"+paused.id+"/connect", "{}"); status != 201 {
		t.Fatalf("connect: %d %v", status, body)
	}
	paused.mustRun("print(w)", "kept")
}
