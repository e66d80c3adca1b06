package e2b_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
)

// A snapshot is listed (by sandbox, by name, a page at a time); new
// sandboxes start from it by passing its id as the template, each with
// its files and variables and none seeing the others'; deleting it twice
// is 204 then 404 (the SDK's true then false).
func TestSnapshotsCreateListStartFromDelete(t *testing.T) {
	srv, _ := newServerWith(t, func(c *config.Config) { c.EnableFilesystem = true }) // os.makedirs
	src := createBox(t, srv, `{"templateID": "filesystem", "timeout": 120}`)
	src.mustRun("y = 7\nimport os\nos.makedirs('/home/user/d', exist_ok=True)\nopen('/home/user/d/f.txt', 'w').write('from the source')")

	status, named := ctl(t, srv, "POST", "/sandboxes/"+src.id+"/snapshots", `{"name": "snap-one"}`)
	snapID, _ := named["snapshotID"].(string)
	if status != 201 || snapID == "" || named["names"] == nil || !slices.Contains(anyStrings(named["names"]), "snap-one") {
		t.Fatalf("named snapshot: %d %v", status, named)
	}
	status, plain := ctl(t, srv, "POST", "/sandboxes/"+src.id+"/snapshots", `{}`)
	plainID, _ := plain["snapshotID"].(string)
	if status != 201 || plainID == "" || plainID == snapID || len(anyStrings(plain["names"])) != 0 {
		t.Fatalf("unnamed snapshot: %d %v", status, plain)
	}
	if st := src.health(); st != 204 {
		t.Errorf("the source after a snapshot: health %d, want running", st)
	}

	for q, want := range map[string][]string{
		"":                              {plainID, snapID},
		"?sandboxID=" + src.id:          {plainID, snapID},
		"?name=snap-one":                {snapID},
		"?name=snap-one-does-not-exist": nil,
		"?sandboxID=not-" + src.id:      nil,
	} {
		status, items, _ := ctlList(t, srv, "/snapshots"+q)
		if status != 200 || !slices.Equal(ids(items, "snapshotID"), want) {
			t.Errorf("GET /snapshots%s: %d %v, want %v", q, status, ids(items, "snapshotID"), want)
		}
	}
	status, page1, next := ctlList(t, srv, "/snapshots?limit=1")
	if status != 200 || len(page1) != 1 || next == "" {
		t.Fatalf("page 1: %d %v next %q", status, page1, next)
	}
	_, page2, last := ctlList(t, srv, "/snapshots?limit=1&nextToken="+next)
	if len(page2) != 1 || last != "" || page2[0]["snapshotID"] == page1[0]["snapshotID"] {
		t.Errorf("page 2: %v next %q", page2, last)
	}

	body, _ := json.Marshal(map[string]any{"templateID": snapID, "timeout": 60})
	a := createBox(t, srv, string(body))
	b := createBox(t, srv, string(body))
	for _, x := range []*box{a, b} {
		if got := x.info()["templateID"]; got != snapID {
			t.Errorf("templateID of a sandbox from a snapshot: %v, want %s", got, snapID)
		}
		x.mustRun("print(y, open('/home/user/d/f.txt').read())", "7 from the source")
	}
	a.mustRun("y = 'changed'\nopen('/home/user/d/f.txt', 'w').write('changed in a')")
	b.mustRun("print(y, open('/home/user/d/f.txt').read())", "7 from the source")
	src.mustRun("print(y, open('/home/user/d/f.txt').read())", "7 from the source")

	if status, body := ctl(t, srv, "DELETE", "/templates/"+snapID, ""); status != 204 {
		t.Fatalf("delete: %d %v", status, body)
	}
	if status, body := ctl(t, srv, "DELETE", "/templates/"+snapID, ""); status != 404 || body["code"] != float64(404) {
		t.Errorf("delete again: %d %v, want 404 with code 404", status, body)
	}
	if _, items, _ := ctlList(t, srv, "/snapshots"); !slices.Equal(ids(items, "snapshotID"), []string{plainID}) {
		t.Errorf("after the delete: %v", ids(items, "snapshotID"))
	}
	// The sandboxes started from it do not depend on it.
	a.mustRun("print(y)", "changed")
}

// fork makes live copies that diverge; a paused source is 409, a count
// out of range 400.
func TestForkCopiesDiverge(t *testing.T) {
	srv, _ := newServer(t)
	src := createBox(t, srv, `{"timeout": 120}`)
	src.mustRun("z = 3\nopen('/home/user/state.txt', 'w').write('before the fork')")

	forks := forkBoxes(t, srv, src.id, `{"count": 2, "timeout": 60}`)
	if len(forks) != 2 || forks[0].id == forks[1].id || forks[0].id == src.id || forks[1].id == src.id {
		t.Fatalf("forks: %v", forks)
	}
	for i, f := range forks {
		if st := f.health(); st != 204 {
			t.Errorf("fork %d: health %d", i, st)
		}
		f.mustRun("print(z, open('/home/user/state.txt').read())", "3 before the fork")
	}
	forks[0].mustRun("z = 4\nopen('/home/user/state.txt', 'w').write('fork 0')")
	forks[1].mustRun("print(z, open('/home/user/state.txt').read())", "3 before the fork")
	src.mustRun("print(z, open('/home/user/state.txt').read())", "3 before the fork")

	if status, body := ctl(t, srv, "POST", "/sandboxes/"+src.id+"/pause", "{}"); status != 204 {
		t.Fatalf("pause: %d %v", status, body)
	}
	if status, body := ctl(t, srv, "POST", "/sandboxes/"+src.id+"/fork", "{}"); status != 409 || body["code"] != float64(409) {
		t.Errorf("fork of a paused sandbox: %d %v, want 409", status, body)
	}
}

// forkBoxes forks the sandbox and returns its copies, failing on a 201
// entry without a sandbox.
func forkBoxes(t *testing.T, srv *httptest.Server, id, body string) []*box {
	t.Helper()
	req, _ := http.NewRequest("POST", srv.URL+"/sandboxes/"+id+"/fork", strings.NewReader(body))
	req.Header.Set("X-API-KEY", aliceKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var results []struct {
		Sandbox *struct {
			SandboxID       string `json:"sandboxID"`
			EnvdAccessToken string `json:"envdAccessToken"`
		} `json:"sandbox"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if resp.StatusCode != 201 || json.Unmarshal(raw, &results) != nil {
		t.Fatalf("fork %s: %d %s", body, resp.StatusCode, raw)
	}
	var out []*box
	for _, r := range results {
		if r.Sandbox == nil {
			t.Fatalf("fork %s: an entry without a sandbox: %s", body, raw)
		}
		b := &box{t: t, srv: srv, id: r.Sandbox.SandboxID, token: r.Sandbox.EnvdAccessToken}
		t.Cleanup(func() { call(t, "DELETE", srv.URL+"/sandboxes/"+b.id, "", map[string]string{"X-API-KEY": aliceKey}) })
		out = append(out, b)
	}
	return out
}

func anyStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// Another key can neither pause, resume, snapshot nor fork a sandbox, nor
// see, delete or start from its snapshots.
func TestPersistenceIsTheKeysOwn(t *testing.T) {
	srv, _ := newServer(t)
	a := createBox(t, srv, `{"timeout": 60}`)
	a.mustRun("secret = 'alice'")
	_, sn := ctl(t, srv, "POST", "/sandboxes/"+a.id+"/snapshots", `{"name": "alices"}`)
	snapID, _ := sn["snapshotID"].(string)
	if snapID == "" {
		t.Fatalf("snapshot: %v", sn)
	}
	t.Cleanup(func() { ctl(t, srv, "DELETE", "/templates/"+snapID, "") })
	bob := map[string]string{"X-API-KEY": bobKey}
	for _, p := range []string{"/sandboxes/" + a.id + "/pause", "/v2/sandboxes/" + a.id + "/connect", "/sandboxes/" + a.id + "/snapshots", "/sandboxes/" + a.id + "/fork"} {
		if status, body := call(t, "POST", srv.URL+p, "{}", bob); status != 404 || body["code"] != float64(404) {
			t.Errorf("bob POST %s: %d %v, want 404", p, status, body)
		}
	}
	if status, body := call(t, "DELETE", srv.URL+"/templates/"+snapID, "", bob); status != 404 {
		t.Errorf("bob deletes alice's snapshot: %d %v", status, body)
	}
	for _, q := range []string{"", "?name=alices", "?sandboxID=" + a.id} {
		req, _ := http.NewRequest("GET", srv.URL+"/snapshots"+q, nil)
		req.Header.Set("X-API-KEY", bobKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(raw)) != "[]" {
			t.Errorf("bob lists /snapshots%s: %d %s", q, resp.StatusCode, raw)
		}
	}
	body, _ := json.Marshal(map[string]any{"templateID": snapID})
	if status, created := call(t, "POST", srv.URL+"/v2/sandboxes", string(body), bob); status == 201 {
		call(t, "DELETE", srv.URL+"/sandboxes/"+created["sandboxID"].(string), "", bob)
		t.Errorf("bob started a sandbox from alice's snapshot: %v", created)
	}
	if st := a.health(); st != 204 {
		t.Errorf("alice's sandbox after bob's attempts: health %d", st)
	}
	if _, items, _ := ctlList(t, srv, "/snapshots?name=alices"); len(items) != 1 {
		t.Errorf("alice's snapshot after bob's delete: %v", items)
	}
}
