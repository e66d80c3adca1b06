package service_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// loopbackServer serves on ip (a loopback address of the host's) and
// counts the requests that reach it: the host's own account of what the
// sandbox reached.
func loopbackServer(t *testing.T, ip string) (addr string, hits *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	hits = &atomic.Int32{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "ok")
	}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return l.Addr().String(), hits
}

// A session's own egress rules narrow the operator's allow list, change
// while the session runs, never widen the list, and hold over a restart.
// What was reached is judged by the servers on the host.
func TestSessionNetworkRulesNarrowTheOperatorsList(t *testing.T) {
	a, hitsA := loopbackServer(t, "127.0.0.2")
	b, hitsB := loopbackServer(t, "127.0.0.3")
	c, hitsC := loopbackServer(t, "127.0.0.4") // not on the operator's list
	cfg := service.LeanTestConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{a, b}
	cfg.AllowedImports = []string{policy.AllImports} // the rules are under test, not the import policy
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Profiles: []string{"network"},
		Network: &egress.NetworkRules{DenyOut: []string{"0.0.0.0/0"}, AllowOut: []string{"127.0.0.2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if se.Network == nil || !slices.Equal(se.Network.AllowOut, []string{"127.0.0.2"}) {
		t.Errorf("created with network %+v", se.Network)
	}
	code := fmt.Sprintf(`import urllib.request, urllib.error
def get(addr):
    try:
        return urllib.request.urlopen("http://" + addr + "/", timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return e.code
[get(%q), get(%q), get(%q)]`, a, b, c)
	reach := func(want string) {
		t.Helper()
		res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: code})
		if err != nil || !res.Success || string(res.Result) != want {
			t.Fatalf("reached %s (%v %+v), want %s", resultOf(res), err, errOf(res), want)
		}
	}
	reach(`["ok",403,403]`)
	if hitsA.Load() != 1 || hitsB.Load() != 0 || hitsC.Load() != 0 {
		t.Fatalf("hits %d %d %d, want 1 0 0", hitsA.Load(), hitsB.Load(), hitsC.Load())
	}

	// Changed while it runs: none, then the operator's list alone.
	if got, err := svc.SetSessionNetwork(ctx, se.ID, "o", service.NetworkRules{}); err != nil || !got.IsZero() {
		t.Fatalf("clear: %+v %v", got, err)
	}
	reach(`["ok","ok",403]`)
	// A rule that names a host off the operator's list reaches nothing new.
	if _, err := svc.SetSessionNetwork(ctx, se.ID, "o", service.NetworkRules{AllowOut: []string{"127.0.0.4", "127.0.0.3"}, DenyOut: []string{"0.0.0.0/0"}}); err != nil {
		t.Fatal(err)
	}
	reach(`[403,"ok",403]`)
	if hitsA.Load() != 2 || hitsB.Load() != 2 || hitsC.Load() != 0 {
		t.Fatalf("hits %d %d %d, want 2 2 0", hitsA.Load(), hitsB.Load(), hitsC.Load())
	}

	// A restart keeps them, and describing the session tells them.
	info, err := svc.RestartSession(ctx, se.ID, "o")
	if err != nil {
		t.Fatal(err)
	}
	if info.Network == nil || !slices.Equal(info.Network.DenyOut, []string{"0.0.0.0/0"}) {
		t.Errorf("after a restart: network %+v", info.Network)
	}
	reach(`[403,"ok",403]`)

	// Bad rules are refused, naming each entry, and change nothing.
	_, err = svc.SetSessionNetwork(ctx, se.ID, "o", service.NetworkRules{DenyOut: []string{"example.com", "10.0.0.0/99"}})
	if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "example.com") || !strings.Contains(err.Error(), "10.0.0.0/99") {
		t.Errorf("bad rules: %v", err)
	}
	reach(`[403,"ok",403]`)
	if _, err := svc.SetSessionNetwork(ctx, "nope", "o", service.NetworkRules{}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Errorf("unknown session: %v", err)
	}
	if _, err := svc.SetSessionNetwork(ctx, se.ID, "someone else", service.NetworkRules{}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Errorf("another owner's session: %v", err)
	}

	// A session without network cannot be given any by rules; denying
	// all is still accepted (E2B's sandboxes without internet carry it).
	plain, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Profiles: []string{"basic"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetSessionNetwork(ctx, plain.ID, "o", service.NetworkRules{AllowOut: []string{"127.0.0.2"}}); !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "SANDBOX_ENABLE_NETWORK") {
		t.Errorf("rules on a session without network: %v", err)
	}
	if _, err := svc.SetSessionNetwork(ctx, plain.ID, "o", egress.DenyAll()); err != nil {
		t.Errorf("deny-all on a session without network: %v", err)
	}
	if _, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Profiles: []string{"basic"}, Network: &egress.NetworkRules{AllowOut: []string{"x.io"}}}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Errorf("create without network, with rules: %v", err)
	}
}

func resultOf(r *service.Result) string {
	if r == nil {
		return "nothing"
	}
	return string(r.Result)
}

func errOf(r *service.Result) any {
	if r == nil {
		return nil
	}
	return r.Error
}

// A session handed a spare, whose proxy started before anyone asked for
// rules, gets its rules all the same.
func TestSessionNetworkRulesHoldOnASpare(t *testing.T) {
	a, hitsA := loopbackServer(t, "127.0.0.2")
	b, hitsB := loopbackServer(t, "127.0.0.3")
	cfg := service.LeanTestConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{a, b}
	cfg.SessionPoolSize, cfg.GVisorSessionPoolSize = 1, 1
	svc := newServiceWith(t, cfg)
	class := "session/" + testBackend(t)
	deadline := time.Now().Add(60 * time.Second)
	for svc.PoolStats()[class].Ready != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no spare session ready: %+v", svc.PoolStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := svc.PoolStats()[class]
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Network: &egress.NetworkRules{DenyOut: []string{"0.0.0.0/0"}, AllowOut: []string{"127.0.0.3"}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := svc.PoolStats()[class]; st.Hits != before.Hits+1 {
		t.Fatalf("the session did not come from the spare: %+v then %+v", before, st)
	}
	res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: fmt.Sprintf(`import urllib.request, urllib.error
def get(addr):
    try:
        return urllib.request.urlopen("http://" + addr + "/", timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return e.code
[get(%q), get(%q)]`, a, b)})
	if err != nil || !res.Success || string(res.Result) != `[403,"ok"]` {
		t.Fatalf("reached %s (%v %+v)", resultOf(res), err, errOf(res))
	}
	if hitsA.Load() != 0 || hitsB.Load() != 1 {
		t.Fatalf("hits %d %d, want 0 1", hitsA.Load(), hitsB.Load())
	}
}
