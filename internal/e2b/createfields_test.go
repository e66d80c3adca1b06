package e2b_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/codecage/codecage/internal/config"
)

// countingServer is a loopback HTTP server that counts the connections
// it accepts: what reaches it is judged on the host, not by what the
// sandbox's code says.
func countingServer(t *testing.T) (addr string, conns *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = &atomic.Int32{}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the host") }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), conns
}

// A sandbox created with allow_internet_access false, or a denyOut that
// covers every address, reaches nothing on a server whose operator
// enabled the network profile: the allow-listed loopback server sees no
// connection from it, by its code or its commands, nor from a sandbox
// started from its snapshot, while a sandbox created without a deny
// reaches it. updateNetwork opens and closes it while it runs.
func TestDeniedEgressReachesNothing(t *testing.T) {
	addr, conns := countingServer(t)
	srv, svc := newServerWith(t, func(c *config.Config) {
		c.EnableNetwork = true
		c.NetworkAllow = []string{addr}
	})
	url := "http://" + addr + "/x"
	code := fmt.Sprintf("import urllib.request\nurllib.request.urlopen(%q, timeout=5).read().decode()", url)

	open := createBox(t, srv, `{"timeout": 120}`)
	open.mustRun(code, "hello from the host")
	if n := conns.Load(); n < 1 {
		t.Fatalf("the open sandbox's run: %d connections on the host, want at least 1", n)
	}
	// Commands try the host directly and through the proxy's address in
	// the sandbox (where an open sandbox's interpreter finds its proxy).
	open.mustRun("import urllib.request\nurllib.request.getproxies()['http']", "http://127.0.0.1:")
	_, got := open.run("import urllib.request\nurllib.request.getproxies()['http']")
	proxy := regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+`).FindString(got)
	command := fmt.Sprintf(`python3 -c '
import urllib.request as u
for p in [{}, {"http": %q}]:
    try:
        print(u.build_opener(u.ProxyHandler(p)).open(%q, timeout=5).read().decode())
    except OSError as e:
        print("failed:", e)
'`, proxy, url)
	if out, stderr, exit := runStream(t, open, command); exit != 0 || !strings.Contains(out, "hello from the host") {
		t.Fatalf("the open sandbox's command through %s: exit %d %q %q", proxy, exit, out, stderr)
	}

	for _, body := range []string{
		`{"timeout": 120, "allow_internet_access": false}`,
		`{"timeout": 120, "allowInternetAccess": false}`,
		`{"timeout": 120, "network": {"denyOut": ["0.0.0.0/0"]}}`,
		`{"timeout": 120, "network": {"denyOut": ["10.0.0.0/8", "::/0"]}}`,
	} {
		closed := createBox(t, srv, body)
		if info, err := svc.GetSession(t.Context(), closed.id, "key:alice"); err != nil || info.Network == nil || len(info.Network.DenyOut) == 0 {
			t.Errorf("%s: network %+v (%v), want a deny", body, info.Network, err)
		}
		before := conns.Load()
		if status, out := closed.run(code); status != 200 || strings.Contains(out, "hello from the host") {
			t.Errorf("%s: the run reached the host: %d %s", body, status, out)
		}
		if out, _, exit := runStream(t, closed, command); exit != 0 || strings.Contains(out, "hello from the host") {
			t.Errorf("%s: the command reached the host: exit %d %q", body, exit, out)
		}
		if n := conns.Load(); n != before {
			t.Errorf("%s: the loopback server saw %d connections from the denied sandbox", body, n-before)
		}
	}

	// The deny is the sandbox's: a sandbox started from its snapshot has
	// no network either, though its own create denies nothing.
	closed := createBox(t, srv, `{"timeout": 120, "allow_internet_access": false}`)
	status, snap := ctl(t, srv, "POST", "/sandboxes/"+closed.id+"/snapshots", `{}`)
	snapID, _ := snap["snapshotID"].(string)
	if status != 201 || snapID == "" {
		t.Fatalf("snapshot: %d %v", status, snap)
	}
	body, _ := json.Marshal(map[string]any{"templateID": snapID, "timeout": 60})
	again := createBox(t, srv, string(body))
	before := conns.Load()
	if out, _, exit := runStream(t, again, command); exit != 0 || strings.Contains(out, "hello from the host") || conns.Load() != before {
		t.Errorf("the denied sandbox's snapshot reached the host: exit %d %q, %d connections", exit, out, conns.Load()-before)
	}

	// updateNetwork while it runs: cleared, the operator's list alone
	// applies; then allowOut with everything else denied; then no
	// internet again. getInfo tells the rules in force.
	host := strings.Split(addr, ":")[0]
	for _, step := range []struct {
		body  string
		reach bool
	}{
		{`{}`, true},
		{`{"allowOut": ["` + host + `"], "denyOut": ["0.0.0.0/0"]}`, true},
		{`{"allowOut": ["10.9.9.9"], "denyOut": ["0.0.0.0/0"]}`, false},
		{`{"allow_internet_access": false}`, false},
	} {
		if status, out := ctl(t, srv, "PUT", "/sandboxes/"+closed.id+"/network", step.body); status != 204 {
			t.Fatalf("update %s: %d %v", step.body, status, out)
		}
		before := conns.Load()
		status, out := closed.run(code)
		if reached := strings.Contains(out, "hello from the host"); status != 200 || reached != step.reach || (conns.Load() > before) != step.reach {
			t.Errorf("after %s: reached %v (%d %s, %d connections), want %v", step.body, reached, status, out, conns.Load()-before, step.reach)
		}
	}
	if status, info := ctl(t, srv, "GET", "/sandboxes/"+closed.id, ""); status != 200 || fmt.Sprint(info["network"]) != "map[allowPublicTraffic:false denyOut:[0.0.0.0/0]]" {
		t.Errorf("getInfo: %d network %v", status, info["network"])
	}
	for body, says := range map[string]string{
		`{"denyOut": ["example.com"]}`:           "example.com",
		`{"egressProxy": {"address": "p:1080"}}`: "egressProxy",
		`{"allowOut": "x"}`:                      "allowOut",
	} {
		if status, out := ctl(t, srv, "PUT", "/sandboxes/"+closed.id+"/network", body); status != 400 || !strings.Contains(fmt.Sprint(out["message"]), says) {
			t.Errorf("update %s: %d %v, want 400 naming %s", body, status, out, says)
		}
	}
	if status, _ := ctl(t, srv, "PUT", "/sandboxes/nope/network", `{}`); status != 404 {
		t.Errorf("update of no sandbox: %d", status)
	}
}

// Create fields that would change what a sandbox may reach, mount or keep
// and that codecage cannot honour are refused with 400 naming the field,
// as is a field E2B does not define; the ones it honours or may ignore
// are accepted.
func TestCreateRefusesFieldsItCannotHonour(t *testing.T) {
	addr, _ := countingServer(t)
	srv, _ := newServerWith(t, func(c *config.Config) {
		c.EnableNetwork = true
		c.NetworkAllow = []string{addr}
	})
	for body, says := range map[string]string{
		`{"volumeMounts": [{"name": "vol", "path": "/mnt/vol"}]}`:                                 "volumeMounts",
		`{"mcp": {"exa": {"apiKey": "k"}}}`:                                                       "mcp",
		`{"iam": {"tokens": {"gh": {"audience": "a", "tokenType": "jwt"}}}}`:                      "iam.tokens",
		`{"templateID": "basic", "network": {"allowOut": ["x.io"]}}`:                              "SANDBOX_ENABLE_NETWORK",
		`{"network": {"allowOut": ["a b"]}}`:                                                      `"a b"`,
		`{"network": {"denyOut": ["example.com"]}}`:                                               "example.com",
		`{"network": {"egressProxy": {"address": "p:1080"}}}`:                                     "network.egressProxy",
		`{"network": {"rules": {"api.x.io": [{"transform": {"body": "x"}}]}}}`:                    "network.rules",
		`{"network": {"rules": {"api.x.io": [{"transform": {"headers": {"Host": "x"}}}]}}}`:       `header "Host" belongs to the connection`,
		`{"network": {"rules": {"10.0.0.1": [{"transform": {"headers": {"X-Key": "x"}}}]}}}`:      `"10.0.0.1"`,
		`{"network": {"rules": {"api.x.io": [{"transform": {"headers": {"X-Key": "a\r\nb"}}}]}}}`: "line breaks",
		`{"network": {"httpsPorts": [8443]}}`:                                                     "network.httpsPorts",
		`{"network": {"maskRequestHost": "localhost:${PORT}"}}`:                                   "network.maskRequestHost",
		`{"network": {"denyAll": true}}`:                                                          `"denyAll"`,
		`{"persistentDisk": "/data"}`:                                                             `"persistentDisk"`,
	} {
		status, out := ctl(t, srv, "POST", "/v2/sandboxes", body)
		msg, _ := out["message"].(string)
		if status != 400 || !strings.Contains(msg, says) {
			t.Errorf("%s: %d %v, want 400 naming %s", body, status, out, says)
		}
	}
	// Accepted: what codecage honours, and fields that ask for nothing.
	for _, body := range []string{
		`{"secure": false, "allow_internet_access": true, "mcp": null, "volumeMounts": [], "iam": {}, "network": {"allowOut": [], "rules": {}, "allowPublicTraffic": false}}`,
		`{"templateID": "basic", "network": {"denyOut": ["8.8.8.8/32"]}}`,
		`{"allow_internet_access": false, "network": {"denyOut": ["8.8.8.8"]}}`,
		`{"network": {"denyOut": ["8.8.8.8"], "allowOut": ["1.1.1.1", "*.example.com"]}}`,
		`{"templateID": "network", "allow_internet_access": false}`,
		`{"templateID": "basic+network", "network": {"denyOut": ["::/0"]}}`,
	} {
		if status, out := ctl(t, srv, "POST", "/v2/sandboxes", body); status != 201 {
			t.Errorf("%s: %d %v, want 201", body, status, out)
		} else {
			ctl(t, srv, "DELETE", "/sandboxes/"+out["sandboxID"].(string), "")
		}
	}
}

// On a server without the network profile no sandbox reaches anything,
// so a partial denyOut is honoured as it stands.
func TestPartialDenyWithoutNetworkProfile(t *testing.T) {
	srv, _ := newServer(t)
	status, out := ctl(t, srv, "POST", "/v2/sandboxes", `{"network": {"denyOut": ["8.8.8.8"]}}`)
	if status != 201 {
		t.Fatalf("%d %v, want 201", status, out)
	}
	ctl(t, srv, "DELETE", "/sandboxes/"+out["sandboxID"].(string), "")
}
