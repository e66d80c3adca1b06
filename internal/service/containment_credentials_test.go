package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

// Code whose session has an egress credential tries to get it: from the
// trust store (hoping for the authority's key), its environment, a
// request that names another host through the opened tunnel, the bound
// host over plain HTTP, proxy variables of its own, and a direct
// connection, and the proxy's port bound for itself. Judged by the server the credential is for: only the
// control request brought it, and on the host no file holds a key or the
// secret.
func TestContainment_56_EgressCredentialsStayOutside(t *testing.T) {
	api := newPrivateAPI(t)
	cfg := api.config(t)
	applyTestEnvironment(t, &cfg)
	cfg.Isolation = testBackend(t)
	svc := newServiceAsIs(t, cfg)
	ctx := context.Background()
	if _, err := svc.PutSecret(ctx, "o", "key", egressCanary); err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf(`import os, socket, ssl, urllib.request
PORT = %[1]s
def attempt(f):
    try:
        return f()
    except Exception as e:
        return "refused: " + type(e).__name__
def trust_store():
    found = []
    for root, dirs, files in os.walk("/opt/codecage/trust"):
        for f in files:
            data = open(os.path.join(root, f)).read()
            found.append(f + (" has a key" if "PRIVATE KEY" in data else " certificates only"))
    return sorted(found)
def tunnel(host_header, accept="gzip"):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT localhost:%%d HTTP/1.1\r\nHost: localhost\r\n\r\n" %% PORT)
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    t = ctx.wrap_socket(s, server_hostname="localhost")
    t.sendall(("GET /v1/%%s HTTP/1.1\r\nHost: %%s\r\nAccept-Encoding: %%s\r\nConnection: close\r\n\r\n" %% (host_header.split(".")[0], host_header, accept)).encode())
    out = b""
    while True:
        b = t.recv(65536)
        if not b:
            return out.decode(errors="replace")
        out += b
def own_proxy():
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": "http://127.0.0.1:9"}))
    return opener.open("https://localhost:%%d/v1/ownproxy" %% PORT, timeout=5).read().decode()
def direct():
    socket.create_connection(("127.0.0.1", PORT), timeout=3)
    return "connected"
def rebind():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 3128))
    s.listen()
    return "bound"
def plain():
    return urllib.request.urlopen("http://localhost:%%d/v1/plain" %% PORT, timeout=5).read().decode()
out = {
    "trust store": trust_store(),
    "environment": any(%[2]q in v for v in os.environ.values()),
    "another host through the tunnel": attempt(lambda: tunnel("evil.example.com").split("\r\n")[0]),
    "echo, compressed asked": attempt(lambda: tunnel("localhost").split("\r\n\r\n", 1)[1]),
    "own proxy variables": attempt(own_proxy),
    "direct": attempt(direct),
    "plain HTTP": attempt(plain),
    "the proxy's port, bound": attempt(rebind),
}
out`, api.port, egressCanary)
	for _, machine := range []bool{false, true} {
		// A machine with servers, as E2B's sandboxes are, may bind TCP ports.
		se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Profiles: []string{"network"}, Machine: machine, Servers: machine,
			Credentials: []service.EgressCredential{{Secret: "key", Host: "localhost", Header: "Authorization", Prefix: "Bearer "}}})
		if err != nil {
			t.Fatal(err)
		}
		api.mu.Lock()
		api.seen = nil
		api.mu.Unlock()
		res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: code})
		if err != nil || !res.Success {
			t.Fatalf("%v %+v", err, errOf(res))
		}
		t.Logf("from inside (machine %v): %s", machine, res.Result)
		var out map[string]any
		if err := json.Unmarshal(res.Result, &out); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(out["trust store"]) != "[bundle.pem certificates only ca.pem certificates only]" {
			t.Errorf("the trust store: %v", out["trust store"])
		}
		if out["environment"] != false {
			t.Error("the secret is in the sandbox's environment")
		}
		if got := fmt.Sprint(out["another host through the tunnel"]); !strings.Contains(got, "421") {
			t.Errorf("a request naming another host in the opened tunnel: %q, want 421", got)
		}
		if got := fmt.Sprint(out["echo, compressed asked"]); got != "you sent: Bearer "+strings.Repeat("*", len(egressCanary)) {
			t.Errorf("the server's echo as the sandbox read it: %q", got)
		}
		for _, k := range []string{"own proxy variables", "direct", "plain HTTP", "the proxy's port, bound"} {
			if got := fmt.Sprint(out[k]); strings.Contains(got, egressCanary) || !strings.HasPrefix(got, "refused") && k != "plain HTTP" {
				t.Errorf("%s: %q", k, got)
			}
		}
		// The server: the control request alone brought the credential; the
		// others never reached it with it.
		api.mu.Lock()
		seen := append([]string(nil), api.seen...)
		api.mu.Unlock()
		withIt := 0
		for _, s := range seen {
			if strings.Contains(s, egressCanary) {
				withIt++
				if !strings.HasPrefix(s, "/v1/localhost ") {
					t.Errorf("the credential went with %q", s)
				}
			}
		}
		if withIt != 1 {
			t.Errorf("%d requests brought the credential, want the control's alone: %q", withIt, seen)
		}
	}
	_ = filepath.Walk(cfg.StateDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() < 4<<20 {
			if data, _ := os.ReadFile(p); strings.Contains(string(data), "PRIVATE KEY") || strings.Contains(string(data), egressCanary) {
				t.Errorf("%s holds a key or the secret", p)
			}
		}
		return nil
	})
}
