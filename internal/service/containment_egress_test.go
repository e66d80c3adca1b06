package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// A session's own egress rules cannot be widened from inside: its code
// asks the proxy for the denied host, points the proxy variables at it,
// goes without a proxy, connects to it directly, and asks for DNS. The rules live in the supervisor's proxy, not in
// the sandbox. Judged by the host's servers: the denied one is never
// reached, the allowed one is (the control).
func TestContainment_47_SessionEgressRulesHoldFromInside(t *testing.T) {
	denied, deniedHits := loopbackServer(t, "127.0.0.2")
	allowed, allowedHits := loopbackServer(t, "127.0.0.3")
	cfg := service.LeanTestConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{denied, allowed}
	cfg.AllowedImports = []string{policy.AllImports}
	applyTestEnvironment(t, &cfg)
	cfg.Isolation = testBackend(t)
	svc := newServiceAsIs(t, cfg)
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Profiles: []string{"network"},
		Network: &egress.NetworkRules{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"127.0.0.3"}}})
	if err != nil {
		t.Fatal(err)
	}
	dHost, dPort, _ := strings.Cut(denied, ":")
	res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: fmt.Sprintf(`import os, socket, urllib.request
def get(url, proxies=None):
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies)) if proxies is not None else urllib.request.build_opener()
        return opener.open(url, timeout=5).read().decode()
    except Exception as e:
        return type(e).__name__
def direct():
    try:
        socket.create_connection((%[1]q, %[2]s), timeout=3)
        return "connected"
    except OSError as e:
        return "refused"
def dns():
    try:
        return socket.getaddrinfo("example.com.", 80)[0][4][0]
    except OSError as e:
        return "refused"
out = {
    "through the proxy": get("http://%[3]s/"),
    "direct": direct(),
    "proxy variables at the host": get("http://%[3]s/", {"http": "http://%[3]s"}),
    "no proxy at all": get("http://%[3]s/", {}),
    "dns": dns(),
    "the allowed host": get("http://%[4]s/"),
}
out`, dHost, dPort, denied, allowed)})
	if err != nil || !res.Success {
		t.Fatalf("%v %+v", err, errOf(res))
	}
	t.Logf("from inside: %s", res.Result)
	if deniedHits.Load() != 0 {
		t.Errorf("the denied server was reached %d times: %s", deniedHits.Load(), res.Result)
	}
	var out map[string]any
	if err := json.Unmarshal(res.Result, &out); err != nil || out["the allowed host"] != "ok" || allowedHits.Load() != 1 {
		t.Errorf("the allowed server (the control): %d hits, %s (%v)", allowedHits.Load(), res.Result, err)
	}
}
