package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// daemonCall sends one request to a sandbox's daemon (port 49983) or
// interpreter (49999), by the SDK's headers or, byHost, by its getHost
// name, with the given token headers; it returns the status and body.
func daemonCall(t *testing.T, srv *httptest.Server, id, domain, port string, byHost bool, method, path string, body []byte, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
	if byHost {
		req.Host = port + "-" + id + "." + domain
	} else {
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", port)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(raw)
}

// A sandbox's traffic access token opens its ports and nothing else, as
// on E2B: its files, processes and interpreter runs need the envd access
// token, which is another string. Judged from the host: what a refused
// call would have written is not in the workspace.
func TestTrafficTokenOpensPortsOnly(t *testing.T) {
	srv, svc := newHostServer(t)
	status, created := call(t, "POST", srv.URL+"/v2/sandboxes", `{"templateID": "base", "timeout": 120}`, map[string]string{"X-API-KEY": aliceKey})
	if status != 201 {
		t.Fatalf("create: %d %v", status, created)
	}
	id, domain := created["sandboxID"].(string), created["domain"].(string)
	envd, _ := created["envdAccessToken"].(string)
	traffic, _ := created["trafficAccessToken"].(string)
	if envd == "" || traffic == "" || envd == traffic {
		t.Fatalf("create gave envdAccessToken %q and trafficAccessToken %q: want two different tokens", envd, traffic)
	}
	ws := filepath.Join(svc.Config().StateDir, "sessions", id)
	if err := os.WriteFile(filepath.Join(ws, "page.txt"), []byte("served-by-"+id), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: api.Owner("alice", ""), Timeout: 2 * time.Minute,
			Command: "exec python3 -m http.server 8000"})
	}()
	t.Cleanup(func() { cancel(); <-done })

	// The traffic token reaches a port.
	host := "8000-" + id + "." + domain
	page := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if status, page = hostGet(t, srv, host, traffic, "/page.txt"); status == 200 {
			break
		}
	}
	if status != 200 || page != "served-by-"+id {
		t.Fatalf("a port with the traffic token: %d %q", status, page)
	}
	// The envd token is not a traffic token either.
	if status, body := hostGet(t, srv, host, envd, "/page.txt"); status != 403 || strings.Contains(body, "served-by") {
		t.Errorf("a port with the envd token as the traffic token: %d %q, want 403", status, body)
	}

	start, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", "echo x > /home/user/by-process"}}})
	stream := map[string]string{"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
	unary := map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
	execute, _ := json.Marshal(map[string]string{"code": "open('/home/user/by-execute', 'w').write('x')\n'ran'"})
	type daemonReq struct {
		name, port, method, path string
		body                     []byte
		header                   map[string]string
		wrote                    string // the file the call makes in the workspace, if it runs
	}
	calls := []daemonReq{
		{"download", "49983", "GET", "/files?path=/home/user/page.txt", nil, nil, ""},
		{"upload", "49983", "POST", "/files?path=/home/user/by-upload", []byte("x"), map[string]string{"Content-Type": "application/octet-stream"}, "by-upload"},
		{"list", "49983", "POST", "/filesystem.Filesystem/ListDir", []byte(`{"path": "/home/user"}`), unary, ""},
		{"process", "49983", "POST", "/process.Process/Start", envelope(0, start), stream, "by-process"},
		{"runCode", "49999", "POST", "/execute", execute, map[string]string{"Content-Type": "application/json"}, "by-execute"},
	}
	with := func(h map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for hk, hv := range h {
			out[hk] = hv
		}
		return out
	}
	for _, c := range calls {
		for _, byHost := range []bool{false, true} {
			for _, header := range []string{"X-Access-Token", "E2b-Traffic-Access-Token"} {
				status, body := daemonCall(t, srv, id, domain, c.port, byHost, c.method, c.path, c.body, with(c.header, header, traffic))
				if status != 401 && status != 403 {
					t.Errorf("%s (by host %v) with the traffic token in %s: %d %.300s, want 401 or 403", c.name, byHost, header, status, body)
				}
				if strings.Contains(body, "served-by") {
					t.Errorf("%s with the traffic token read the file: %.300s", c.name, body)
				}
			}
		}
		if c.wrote != "" {
			if _, err := os.Stat(filepath.Join(ws, c.wrote)); !os.IsNotExist(err) {
				t.Errorf("%s with the traffic token made %s in the workspace (%v)", c.name, c.wrote, err)
			}
		}
	}
	// The envd token still opens every one of them.
	for _, c := range calls {
		status, body := daemonCall(t, srv, id, domain, c.port, false, c.method, c.path, c.body, with(c.header, "X-Access-Token", envd))
		if status != 200 {
			t.Errorf("%s with the envd token: %d %.300s, want 200", c.name, status, body)
		}
		if c.name == "download" && body != "served-by-"+id {
			t.Errorf("download with the envd token: %q", body)
		}
	}
	for _, f := range []string{"by-upload", "by-process", "by-execute"} {
		deadline := time.Now().Add(10 * time.Second)
		for _, err := os.Stat(filepath.Join(ws, f)); err != nil; _, err = os.Stat(filepath.Join(ws, f)) {
			if time.Now().After(deadline) {
				t.Errorf("the envd token's call did not make %s: %v", f, err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The SDK sends the interpreter's context calls the traffic token
	// alone: those it opens.
	if status, body := daemonCall(t, srv, id, domain, "49999", false, "GET", "/contexts", nil, map[string]string{"E2b-Traffic-Access-Token": traffic}); status != 200 {
		t.Errorf("listing contexts with the traffic token: %d %.300s, want 200", status, body)
	}
}
