package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/tlsfixture"
)

const egressCanary = "sk-egress-canary-3b8e71d2"

// privateAPI is an HTTPS server for "localhost" under an authority of the
// test's own (the operator's SANDBOX_EGRESS_ROOTS), recording the
// Authorization of each request and echoing it, as a careless API might.
type privateAPI struct {
	port, caFile string
	mu           sync.Mutex
	seen         []string
}

func newPrivateAPI(t *testing.T) *privateAPI {
	t.Helper()
	a := &privateAPI{}
	srv := tlsfixture.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		a.mu.Lock()
		a.seen = append(a.seen, r.URL.Path+" "+auth)
		a.mu.Unlock()
		w.Header().Set("X-Echo", auth)
		io.WriteString(w, "you sent: "+auth)
	}))
	a.port, a.caFile = srv.Port, srv.CAFile
	return a
}

// config is a lean service's, with the network to the API alone and its
// authority among the proxy's roots.
func (a *privateAPI) config(t *testing.T) config.Config {
	cfg := service.LeanTestConfig()
	cfg.StateDir = t.TempDir()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{"localhost:" + a.port}
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.EgressRoots = a.caFile
	return cfg
}

// saw is what the server got for path ("" if nothing).
func (a *privateAPI) saw(path string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.seen) - 1; i >= 0; i-- {
		if p, auth, _ := strings.Cut(a.seen[i], " "); p == path {
			return "got " + auth
		}
	}
	return ""
}

// events keeps what the service reports, to judge the audit trail.
type eventLog struct {
	mu   sync.Mutex
	list []service.Event
}

func (l *eventLog) Observe(e service.Event) {
	l.mu.Lock()
	l.list = append(l.list, e)
	l.mu.Unlock()
}

func (l *eventLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, _ := json.Marshal(l.list)
	return string(b)
}

// A secret the owner stored goes into the sandbox's HTTPS requests to
// the host it is bound to, added by the proxy outside; the code, its
// files, its processes and the audit log never see it. Judged from the
// host and from the server that received it.
func TestEgressCredentialsStayOutsideTheSandbox(t *testing.T) {
	api := newPrivateAPI(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "plain got "+r.Header.Get("Authorization"))
	}))
	t.Cleanup(plain.Close)
	plainPort := listenerPort(t, plain.Listener.Addr())

	cfg := api.config(t)
	cfg.NetworkAllow = append(cfg.NetworkAllow, "localhost:"+plainPort, "127.0.0.1:"+api.port)
	svc := newServiceWith(t, cfg)
	events := &eventLog{}
	svc.SetObserver(events)
	ctx := context.Background()
	binding := service.EgressCredential{Name: "api", Secret: "api-key", Host: "localhost", Port: portNumber(t, api.port),
		PathPrefix: "/v1/", Header: "Authorization", Prefix: "Bearer "}
	req := service.SessionRequest{Owner: "o", Machine: true, Profiles: []string{"network"}, AllowedImports: []string{policy.AllImports},
		Credentials: []service.EgressCredential{binding}}

	// A binding of a secret not stored is refused at create, naming it.
	if _, err := svc.CreateSession(ctx, req); !errors.Is(err, service.ErrNotFound) || !strings.Contains(err.Error(), `"api-key"`) {
		t.Fatalf("create with a secret not stored: %v", err)
	}
	if _, err := svc.PutSecret(ctx, "o", "api-key", egressCanary); err != nil {
		t.Fatal(err)
	}
	se, err := svc.CreateSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := svc.ListSecrets(ctx, "o"); err != nil || len(list) != 1 || list[0].Name != "api-key" {
		t.Errorf("ListSecrets = %+v, %v", list, err)
	}

	masked := "you sent: Bearer " + strings.Repeat("*", len(egressCanary))
	code := fmt.Sprintf(`import ssl, urllib.request
def get(url, **kw):
    try:
        r = urllib.request.urlopen(url, timeout=20, **kw)
        return "%%d %%s %%s" %% (r.status, r.read().decode(), r.headers.get("X-Echo"))
    except Exception as e:
        return "error " + str(e)
print(get("https://localhost:%[1]s/v1/python"))
print(get("https://localhost:%[1]s/v2/python"))
print(get("http://localhost:%[2]s/v1/plain"))
print(get("https://127.0.0.1:%[1]s/v1/by-address", context=ssl._create_unverified_context()))
`, api.port, plainPort)
	res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: code})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 4 || lines[0] != "200 "+masked+" None" {
		t.Fatalf("the sandbox's requests:\n%s\n%s", res.Stdout, res.Stderr)
	}
	if got := api.saw("/v1/python"); got != "got Bearer "+egressCanary {
		t.Errorf("the server, under the binding's path: %q", got)
	}
	if got := api.saw("/v2/python"); got != "got " || lines[1] != "200 you sent:  " {
		t.Errorf("outside the binding's path: the server %q, the sandbox %q", got, lines[1])
	}
	if lines[2] != "200 plain got  None" {
		t.Errorf("plain HTTP to the same host: %q", lines[2])
	}
	if got := api.saw("/v1/by-address"); got != "got " {
		t.Errorf("the same server by another name: %q (%q)", got, lines[3])
	}

	// A program of the machine (curl) goes through the same proxy and
	// trusts the same store.
	cmd, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", Timeout: time.Minute,
		Command: "curl -sS https://localhost:" + api.port + "/v1/curl"})
	if err != nil || cmd.Stdout != masked {
		t.Errorf("curl in the machine: %+v %v", cmd, err)
	}
	if got := api.saw("/v1/curl"); got != "got Bearer "+egressCanary {
		t.Errorf("the server, for curl: %q", got)
	}

	// From the host: not in the sandbox's processes, files, trust store;
	// the trust store holds certificates, never a key.
	ws, err := os.Stat(filepath.Join(cfg.StateDir, "sessions", se.ID))
	if err != nil {
		t.Fatal(err)
	}
	// Every process of the host (the sandbox's own, natively; runsc's
	// sentry and gofer under gVisor, whose processes are the sentry's).
	if testBackend(t) == "native" && !slices.ContainsFunc(leftovers.HostProcesses(), func(p leftovers.Process) bool {
		return p.UID() == int(ws.Sys().(*syscall.Stat_t).Uid)
	}) {
		t.Fatal("no process of the sandbox on the host")
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		for _, f := range []string{"environ", "cmdline"} {
			if data, _ := os.ReadFile("/proc/" + e.Name() + "/" + f); strings.Contains(string(data), egressCanary) {
				cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
				t.Errorf("the canary in process %s's %s (%q)", e.Name(), f, cmd)
			}
		}
	}
	stores := 0
	_ = filepath.Walk(cfg.StateDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > 4<<20 {
			return nil
		}
		data, _ := os.ReadFile(p)
		if strings.Contains(string(data), egressCanary) {
			t.Errorf("the canary in the clear in %s", p)
		}
		if strings.Contains(p, "/trust/") {
			stores++
			if strings.Contains(string(data), "PRIVATE KEY") {
				t.Errorf("a key in the trust store: %s", p)
			}
		}
		return nil
	})
	if stores != 2 {
		t.Errorf("%d files in trust stores, want the session's ca.pem and bundle.pem", stores)
	}

	// A fork has the binding, resolved under its owner (the owner's secret,
	// no copy of it); the snapshot it came from holds no value.
	forks, err := svc.ForkSession(ctx, se.ID, "o", 1, 0)
	if err != nil || len(forks) != 1 || forks[0].Session == nil {
		t.Fatalf("fork: %+v %v", forks, err)
	}
	fork := forks[0].Session
	if len(fork.EgressCredentials) != 1 || !reflect.DeepEqual(fork.EgressCredentials[0], binding) {
		t.Errorf("the fork's bindings: %+v", fork.EgressCredentials)
	}
	res, err = svc.Execute(ctx, service.Request{SessionID: fork.ID, Owner: "o",
		Code: fmt.Sprintf(`import urllib.request; print(urllib.request.urlopen("https://localhost:%s/v1/fork").read().decode())`, api.port)})
	if err != nil || strings.TrimSpace(res.Stdout) != masked {
		t.Errorf("the fork's request: %+v %v", res, err)
	}

	// A deleted secret: the next tunnel is refused, naming the binding.
	if err := svc.DeleteSecret(ctx, "o", "api-key"); err != nil {
		t.Fatal(err)
	}
	res, err = svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: "print(get(\"https://localhost:" + api.port + "/v1/after\"))"})
	if err != nil || !strings.Contains(res.Stdout, "502") {
		t.Errorf("after the secret was deleted: %+v %v", res, err)
	}
	if api.saw("/v1/after") != "" {
		t.Error("a request went out after its secret was deleted")
	}

	// The audit trail names the secret and the binding, never the value.
	text := events.text()
	if strings.Contains(text, egressCanary) {
		t.Error("the canary in the service's events")
	}
	if !strings.Contains(text, `api added for GET localhost`) {
		t.Errorf("no event of the credential's use: %s", text)
	}
	info, _ := json.Marshal(se)
	if strings.Contains(string(info), egressCanary) {
		t.Error("the canary in the session's info")
	}
}

func listenerPort(t *testing.T, a net.Addr) string {
	t.Helper()
	_, port, err := net.SplitHostPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func portNumber(t *testing.T, port string) int {
	t.Helper()
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Values a sandbox's creator gave inline (E2B's network rules) are the
// sandbox's own: a park and a resume keep them (the session comes back
// under its id, into a spare or a new sandbox), a fork has none, and
// they are forgotten when the sandbox ends.
func TestEgressCredentialsGivenInlineStayWithTheSandbox(t *testing.T) {
	api := newPrivateAPI(t)
	cfg := api.config(t)
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Profiles: []string{"network"}, AllowedImports: []string{policy.AllImports}})
	if err != nil {
		t.Fatal(err)
	}
	inline := "Bearer " + egressCanary + "-inline"
	err = svc.SetSandboxCredentials(ctx, se.ID, "o", []service.InlineCredential{
		{Binding: service.EgressCredential{Name: "localhost Authorization", Host: "localhost", Header: "Authorization"}, Value: inline}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(id, path string) string {
		t.Helper()
		res, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: "o", Code: fmt.Sprintf(`import urllib.request
try:
    print(urllib.request.urlopen("https://localhost:%s%s", timeout=20).status)
except Exception as e:
    print("error", e)`, api.port, path)})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(res.Stdout)
	}
	if got := get(se.ID, "/v1/before"); got != "200" || api.saw("/v1/before") != "got "+inline {
		t.Fatalf("before the park: %q, the server %q", got, api.saw("/v1/before"))
	}
	if _, err := svc.PauseSession(ctx, se.ID, "o", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ResumeSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	if got := get(se.ID, "/v1/after-park"); got != "200" || api.saw("/v1/after-park") != "got "+inline {
		t.Errorf("after a park and a resume: %q, the server %q", got, api.saw("/v1/after-park"))
	}
	forks, err := svc.ForkSession(ctx, se.ID, "o", 1, 0)
	if err != nil || len(forks) != 1 || forks[0].Session == nil {
		t.Fatalf("fork: %+v %v", forks, err)
	}
	if got := get(forks[0].Session.ID, "/v1/fork"); !strings.Contains(got, "502") || api.saw("/v1/fork") != "" {
		t.Errorf("a fork's request: %q, the server %q; want it refused, naming the binding", got, api.saw("/v1/fork"))
	}
	if err := svc.CloseSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	// Forgotten: nothing of the sandbox's own is left in the vault.
	left := 0
	_ = filepath.Walk(filepath.Join(cfg.StateDir, "secrets"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			left++
		}
		return nil
	})
	if left != 0 {
		t.Errorf("%d sealed values left after the sandbox closed", left)
	}
}

// The operator's credentials (SANDBOX_EGRESS_CREDENTIALS) go with every
// sandbox that has the network: a run's and a session's; their values
// come from the server's environment and are never the owner's to list.
func TestOperatorEgressCredentialsReachEverySandbox(t *testing.T) {
	api := newPrivateAPI(t)
	t.Setenv("CODECAGE_TEST_OPERATOR_KEY", "Bearer "+egressCanary+"-operator")
	file := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(file, []byte(`{"credentials": [{"name": "gateway", "host": "localhost", "path_prefix": "/llm/",
		"header": "Authorization", "value_env": "CODECAGE_TEST_OPERATOR_KEY"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := api.config(t)
	cfg.EgressCredentials = file
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	code := func(path string) string {
		return fmt.Sprintf(`import urllib.request
print(urllib.request.urlopen("https://localhost:%s%s", timeout=20).status)`, api.port, path)
	}
	res, err := svc.Execute(ctx, service.Request{Owner: "o", Profiles: []string{"network"}, Code: code("/llm/run")})
	if err != nil || strings.TrimSpace(res.Stdout) != "200" {
		t.Fatalf("a run: %+v %v", res, err)
	}
	want := "got Bearer " + egressCanary + "-operator"
	if got := api.saw("/llm/run"); got != want {
		t.Errorf("the server, for a run: %q", got)
	}
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Profiles: []string{"network"}, AllowedImports: []string{policy.AllImports}})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/llm/session", "/other"} {
		if res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: code(path)}); err != nil || strings.TrimSpace(res.Stdout) != "200" {
			t.Fatalf("a session, %s: %+v %v", path, res, err)
		}
	}
	if got := api.saw("/llm/session"); got != want {
		t.Errorf("the server, for a session: %q", got)
	}
	if got := api.saw("/other"); got != "got " {
		t.Errorf("outside the operator's path prefix: %q", got)
	}
	if list, err := svc.ListSecrets(ctx, "o"); err != nil || len(list) != 0 {
		t.Errorf("the owner's secrets: %+v %v", list, err)
	}

	// A bad file stops the server from starting, naming the entry, never
	// the value.
	if err := os.WriteFile(file, []byte(`{"credentials": [{"name": "gateway", "host": "localhost", "header": "Host", "value_env": "CODECAGE_TEST_OPERATOR_KEY"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := service.New(cfg, nil); err == nil || !strings.Contains(err.Error(), `"gateway"`) || strings.Contains(err.Error(), egressCanary) {
		t.Errorf("a bad credentials file: %v", err)
	}
}
