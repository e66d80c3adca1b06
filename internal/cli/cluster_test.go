package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/audit"
	"github.com/codecage/codecage/internal/pgtest"
)

const (
	aliceKey   = "alice-key-0123456789abcdef"
	bobKey     = "bob-key-0123456789abcdef00"
	peerSecret = "peer-secret-for-the-cluster-test"
)

// replicas starts n `codecage serve` processes sharing PostgreSQL, each
// announcing its own loopback address.
func startReplicas(t testing.TB, dsn string, n int, extra ...string) []*server {
	t.Helper()
	out := make([]*server, n)
	var wg sync.WaitGroup
	for i := range n {
		addr, env := replicaEnv(t, dsn, fmt.Sprintf("replica-%d", i), extra...)
		// Together, as a Deployment's pods start: the schema and the
		// registry are created once.
		wg.Go(func() {
			out[i] = startServeOn(t, addr, env...)
			out[i].state = envValue(env, "SANDBOX_STATE_DIR")
		})
	}
	wg.Wait()
	for i, s := range out {
		if s == nil {
			t.Fatalf("replica %d did not start", i)
		}
	}
	return out
}

// replicaEnv is the address and settings of one replica named name.
func replicaEnv(t testing.TB, dsn, name string, extra ...string) (string, []string) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return addr, append([]string{
		"SANDBOX_AUDIT_DB=" + dsn,
		"SANDBOX_REPLICA_URL=http://" + addr,
		"SANDBOX_REPLICA_NAME=" + name,
		"SANDBOX_PEER_SECRET=" + peerSecret,
		"SANDBOX_API_KEYS=alice:" + aliceKey + ",bob:" + bobKey,
		"SANDBOX_STATE_DIR=" + t.TempDir(),
	}, extra...)
}

// envValue is the last value env gives name.
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// call sends a REST request with key and decodes the JSON answer.
func call(t testing.TB, method, url, key string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, r)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	data, _ := io.ReadAll(resp.Body)
	if len(data) > 0 {
		if err := json.Unmarshal(data, &out); err != nil {
			var list []any
			if json.Unmarshal(data, &list) != nil {
				t.Fatalf("%s %s: %d %q", method, url, resp.StatusCode, data)
			}
			out["list"] = list
		}
	}
	return resp.StatusCode, out
}

// TestReplicasServeAnySession: three replicas, one PostgreSQL. A session
// made through one is usable through every one (REST, streaming, the file
// API and MCP), each key sees only its own sessions, the audit rows of all
// three land in the one database, and a session whose replica stops
// answers "session lost" while the others go on.
func TestReplicasServeAnySession(t *testing.T) {
	pg := pgtest.Start(t)
	rs := startReplicas(t, pg.DSN(), 3)

	code, info := call(t, "POST", rs[0].url+"/sessions", aliceKey, map[string]any{})
	if code != 201 {
		t.Fatalf("create session: %d %v", code, info)
	}
	id := info["session_id"].(string)
	if !strings.Contains(id, "-r") {
		t.Fatalf("session id %q does not name its replica", id)
	}

	// 21 calls, round robin: each replica serves 7, the variable counts on.
	if code, res := call(t, "POST", rs[1].url+"/sessions/"+id+"/execute", aliceKey, map[string]any{"code": "n = 0"}); code != 200 || res["success"] != true {
		t.Fatalf("first run: %d %v", code, res)
	}
	for i := 1; i <= 20; i++ {
		r := rs[i%3]
		code, res := call(t, "POST", r.url+"/execute", aliceKey, map[string]any{"session_id": id, "code": "n += 1\nn"})
		if code != 200 || res["result"] != float64(i) {
			t.Fatalf("call %d through %s: %d %v", i, r.url, code, res)
		}
	}

	// Files: written through one replica, seen by the code and read through
	// the others.
	if code, res := call(t, "PUT", rs[2].url+"/sessions/"+id+"/files/content", aliceKey, map[string]any{"path": "in.txt", "content": "from replica 2"}); code != 200 {
		t.Fatalf("write file: %d %v", code, res)
	}
	if code, res := call(t, "POST", rs[1].url+"/sessions/"+id+"/execute", aliceKey, map[string]any{"code": "open('in.txt').read().upper()"}); code != 200 || res["result"] != "FROM REPLICA 2" {
		t.Fatalf("read in code: %d %v", code, res)
	}
	if code, res := call(t, "POST", rs[0].url+"/sessions/"+id+"/execute", aliceKey, map[string]any{"code": "open('out.txt', 'w').write('made by code')"}); code != 200 {
		t.Fatalf("write in code: %d %v", code, res)
	}
	if code, res := call(t, "GET", rs[1].url+"/sessions/"+id+"/files/content?path=out.txt", aliceKey, nil); code != 200 || res["content"] != "made by code" {
		t.Fatalf("read file: %d %v", code, res)
	}
	if code, res := call(t, "GET", rs[2].url+"/sessions/"+id+"/files", aliceKey, nil); code != 200 || len(res["files"].([]any)) != 2 {
		t.Fatalf("list files: %d %v", code, res)
	}
	if code, res := call(t, "DELETE", rs[1].url+"/sessions/"+id+"/files/content?path=in.txt", aliceKey, nil); code != 204 {
		t.Fatalf("delete file: %d %v", code, res)
	}
	if code, res := call(t, "POST", rs[2].url+"/commands", aliceKey, map[string]any{"session_id": id, "command": "ls"}); code != 200 || strings.TrimSpace(res["stdout"].(string)) != "out.txt" {
		t.Fatalf("command in the session: %d %v", code, res)
	}

	// Its log is read through any replica: the command run through
	// replica 2 is there, read through replica 1.
	if code, res := call(t, "GET", rs[1].url+"/sessions/"+id+"/logs?level=info&search=command%20started", aliceKey, nil); code != 200 || len(res["logs"].([]any)) != 1 ||
		res["logs"].([]any)[0].(map[string]any)["fields"].(map[string]any)["command"] != "ls" {
		t.Fatalf("the session's log through another replica: %d %v", code, res)
	}

	// Output streams through the forwarding replica as the code prints.
	lines := streamRun(t, rs[1].url+"/sessions/"+id+"/execute", aliceKey, "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.2)")
	if want := []string{"stdout:tick 0", "stdout:tick 1", "stdout:tick 2", "result"}; strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("streamed events %q, want %q", lines, want)
	}

	// Another key cannot reach it through any replica.
	for _, r := range rs {
		if code, res := call(t, "POST", r.url+"/execute", bobKey, map[string]any{"session_id": id, "code": "n"}); code != 404 || res["kind"] != "session_not_found" {
			t.Fatalf("bob through %s: %d %v", r.url, code, res)
		}
	}
	// A session of bob's on replica 2, listed through replica 0 with
	// alice's list not showing it.
	_, binfo := call(t, "POST", rs[2].url+"/sessions", bobKey, map[string]any{})
	bid := binfo["session_id"].(string)
	listed := func(r *server, key string) []string {
		t.Helper()
		code, res := call(t, "GET", r.url+"/sessions", key, nil)
		if code != 200 {
			t.Fatalf("list: %d %v", code, res)
		}
		var ids []string
		for _, s := range res["sessions"].([]any) {
			ids = append(ids, s.(map[string]any)["session_id"].(string))
		}
		return ids
	}
	if got := listed(rs[0], aliceKey); len(got) != 1 || got[0] != id {
		t.Fatalf("alice lists %v through replica 0, want [%s]", got, id)
	}
	if got := listed(rs[1], bobKey); len(got) != 1 || got[0] != bid {
		t.Fatalf("bob lists %v through replica 1, want [%s]", got, bid)
	}

	// MCP over streamable HTTP: stateless, so any replica takes any call.
	cs := mcpClient(t, rs[2].url+"/mcp", aliceKey)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"session_id": id, "code": "n * 2"}})
	if err != nil || res.IsError {
		t.Fatalf("MCP execute_code: %v %+v", err, res)
	}
	if sc, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(sc), `"result":40`) {
		t.Fatalf("MCP result %s", sc)
	}
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"session_id": id, "path": "out.txt"}})
	if err != nil || res.IsError {
		t.Fatalf("MCP read_file: %v %+v", err, res)
	}

	// Forged ids reach no host: an unknown replica is an unknown session.
	if code, res := call(t, "POST", rs[0].url+"/execute", aliceKey, map[string]any{"session_id": "s0123-rdeadbeef", "code": "1"}); code != 404 || res["kind"] != "session_not_found" {
		t.Fatalf("forged id: %d %v", code, res)
	}
	// The peer endpoint refuses calls not signed with the secret.
	for _, h := range []map[string]string{{}, {"X-Codecage-Replica": "rdeadbeef", "X-Codecage-Signature": "00"}} {
		req, _ := http.NewRequest("POST", rs[0].url+"/internal/peer", strings.NewReader(`{"op":"list","owner":"key:alice"}`))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("unsigned peer call: %d", resp.StatusCode)
		}
	}

	// A stateless run through each replica, then: every replica's audit
	// rows are in the one database, and each session run is there once,
	// written by the replica that ran it.
	for _, r := range rs {
		if code, res := call(t, "POST", r.url+"/execute", aliceKey, map[string]any{"code": "1"}); code != 200 {
			t.Fatalf("stateless run: %d %v", code, res)
		}
	}
	db, err := audit.OpenPostgresReadOnly(context.Background(), pg.DSN(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const sessionRuns = 25 // n = 0, 20 counts, 2 file runs, the stream, MCP
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs, err := db.List(context.Background(), audit.Query{Kind: audit.KindExecute, Key: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		runs, byReplica := 0, map[string]int{}
		for _, ev := range evs {
			byReplica[ev.Replica]++
			if strings.HasPrefix(ev.Detail, "session:"+id) {
				runs++
				if ev.Replica != "replica-0" {
					t.Fatalf("a run of replica 0's session audited by %q: %+v", ev.Replica, ev)
				}
			}
		}
		if runs == sessionRuns && len(byReplica) == 3 {
			break
		}
		if runs > sessionRuns || time.Now().After(deadline) {
			t.Fatalf("%d session runs audited (want %d); by replica %v", runs, sessionRuns, byReplica)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The owner stops: its session is lost, clearly; the others live on.
	owner := rs[0]
	_ = owner.cmd.Process.Signal(syscall.SIGTERM)
	<-owner.exited
	owner.exited <- nil // for the cleanup
	for _, r := range rs[1:] {
		code, res := call(t, "POST", r.url+"/execute", aliceKey, map[string]any{"session_id": id, "code": "n"})
		if code != 410 || res["kind"] != "session_lost" || !strings.Contains(res["detail"].(string), "replica-0") {
			t.Fatalf("session of a stopped replica through %s: %d %v", r.url, code, res)
		}
	}
	if got := listed(rs[1], aliceKey); len(got) != 0 {
		t.Fatalf("alice still lists %v", got)
	}
	if code, res := call(t, "POST", rs[1].url+"/execute", bobKey, map[string]any{"session_id": bid, "code": "1 + 1"}); code != 200 || res["result"] != float64(2) {
		t.Fatalf("bob's session after replica 0 stopped: %d %v", code, res)
	}
}

// streamRun runs code with Accept: text/event-stream and returns the
// events: "stdout:<line>" for output, then "result".
func streamRun(t *testing.T, url, key, code string) []string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"code": code})
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	var event string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "stdout":
			var l struct{ Line string }
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &l)
			events = append(events, "stdout:"+l.Line)
		case strings.HasPrefix(line, "data: "):
			events = append(events, event)
		}
	}
	return events
}

// mcpClient connects the official Go MCP client over streamable HTTP.
func mcpClient(t *testing.T, url, key string) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: bearerTransport{key: key}}
	client := mcp.NewClient(&mcp.Implementation{Name: "cluster-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestReplicaCrashAndDatabaseOutage: with PostgreSQL down, runs go on
// (forwarded ones too) and their audit rows are written once it is back;
// a replica that crashes (SIGKILL: no goodbye) makes its sessions answer
// "unavailable" at first, then "session lost" once its heartbeat is
// overdue, every request answered within its deadline.
func TestReplicaCrashAndDatabaseOutage(t *testing.T) {
	pg := pgtest.Start(t)
	rs := startReplicas(t, pg.DSN(), 2)
	_, info := call(t, "POST", rs[0].url+"/sessions", aliceKey, map[string]any{})
	id := info["session_id"].(string)
	_, other := call(t, "POST", rs[1].url+"/sessions", aliceKey, map[string]any{})
	otherID := other["session_id"].(string)
	// Replica 1 learns where replica 0 is (from its heartbeat's copy of
	// the registry, or at its first forward); then the database goes.
	if code, res := call(t, "POST", rs[1].url+"/execute", aliceKey, map[string]any{"session_id": id, "code": "1"}); code != 200 {
		t.Fatalf("forwarded run: %d %v", code, res)
	}
	pg.Stop()
	for i := range 5 {
		if code, res := call(t, "POST", rs[1].url+"/execute", aliceKey, map[string]any{"session_id": id, "code": fmt.Sprintf("'outage-%d'", i)}); code != 200 || res["success"] != true {
			t.Fatalf("forwarded run with the database down: %d %v", code, res)
		}
		if code, res := call(t, "POST", rs[0].url+"/execute", aliceKey, map[string]any{"code": "2 + 2"}); code != 200 || res["result"] != float64(4) {
			t.Fatalf("run with the database down: %d %v", code, res)
		}
	}
	for _, r := range rs {
		resp, err := http.Get(r.url + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s not ready while the shared database is down: %d", r.url, resp.StatusCode)
		}
	}
	pg.Start()
	db, err := audit.OpenPostgresReadOnly(context.Background(), pg.DSN(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := db.List(context.Background(), audit.Query{Kind: audit.KindExecute, Replica: "replica-0"})
		if err == nil && len(evs) >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runs made during the outage were not written after it: %d rows, %v", len(evs), err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A crash.
	crashed := rs[0]
	_ = crashed.cmd.Process.Signal(syscall.SIGKILL)
	<-crashed.exited
	crashed.exited <- nil
	unmountUnder(t, crashed.state)
	sawLost := false
	deadline = time.Now().Add(60 * time.Second)
	for !sawLost {
		start := time.Now()
		code, res := call(t, "POST", rs[1].url+"/execute", aliceKey, map[string]any{"session_id": id, "code": "1"})
		if took := time.Since(start); took > 45*time.Second {
			t.Fatalf("a request for the crashed replica's session took %s", took)
		}
		switch {
		case code == 410 && res["kind"] == "session_lost" && strings.Contains(res["detail"].(string), "not been heard from"):
			sawLost = true
		case code == 503 && res["kind"] == "unavailable" && strings.Contains(res["detail"].(string), "replica-0"):
			time.Sleep(500 * time.Millisecond)
		default:
			t.Fatalf("session of a crashed replica: %d %v", code, res)
		}
		if time.Now().After(deadline) {
			t.Fatal("the crashed replica's session never became \"lost\"")
		}
	}
	if code, res := call(t, "POST", rs[1].url+"/execute", aliceKey, map[string]any{"session_id": otherID, "code": "'alive'"}); code != 200 || res["result"] != "alive" {
		t.Fatalf("the surviving replica's session: %d %v", code, res)
	}
}

// unmountUnder detaches the mounts a killed server left below dir (its
// session workspaces), as the end of a container would.
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", points[i], err)
		}
	}
}

// Cluster settings that cannot work are refused before anything starts,
// naming the setting; a database that does not answer is too.
func TestClusterSettingsErrors(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"SANDBOX_REPLICA_URL=http://127.0.0.1:9"}, "SANDBOX_AUDIT_DB to a postgres:// URL"},
		{[]string{"SANDBOX_REPLICA_URL=http://127.0.0.1:9", "SANDBOX_AUDIT_DB=postgres://u@127.0.0.1:1/x", "SANDBOX_PEER_SECRET=short"}, "at least 16 characters"},
		{[]string{"SANDBOX_PEER_SECRET=0123456789abcdef0123"}, "SANDBOX_REPLICA_URL is not"},
		{[]string{"SANDBOX_AUDIT_DB=postgres:/nope"}, "postgres:// URL"},
	} {
		for _, kv := range c.env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		code, _, stderr := cli(t, "", "serve", "--listen", "127.0.0.1:0")
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", c.env, code, stderr, c.want)
		}
		for _, kv := range c.env {
			k, _, _ := strings.Cut(kv, "=")
			os.Unsetenv(k)
		}
	}

	start := time.Now()
	t.Setenv("SANDBOX_AUDIT_DB", "postgres://codecage:pw-not-shown@127.0.0.1:1/audit?sslmode=disable")
	code, _, stderr := cli(t, "", "serve", "--listen", "127.0.0.1:0")
	if code == exitOK || !strings.Contains(stderr, "SANDBOX_AUDIT_DB") || !strings.Contains(stderr, "127.0.0.1:1/audit") || strings.Contains(stderr, "pw-not-shown") {
		t.Fatalf("database down at start: exit %d, stderr %q", code, stderr)
	}
	if took := time.Since(start); took > 60*time.Second {
		t.Fatalf("gave up after %s", took)
	}
}
