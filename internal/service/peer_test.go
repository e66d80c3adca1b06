package service

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/session"
)

// goldenID is the session of the calls in testdata/peer.
const goldenID = "sabc123-r2"

// goldenV1 reads the calls a replica of the release before this one sent
// (testdata/peer, written by its code), by name.
func goldenV1(t *testing.T) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "peer", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("testdata/peer: %v (%d files)", err, len(paths))
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = b
	}
	return out
}

// goldenArgs are the arguments each golden call carries, as the row of
// its operation types them.
var goldenArgs = map[string]any{
	"execute": Request{Code: "print(1)", SessionID: goldenID, Owner: "alice", Timeout: 90 * time.Second,
		Profiles: []string{"numpy"}, Env: map[string]string{"A": "1"}},
	"write_file":        writeArgs{Path: "data/in.txt", Data: []byte("hello\x00world"), Metadata: map[string]string{"k": "v"}},
	"write_file_append": writeArgs{Path: ".upload-1/big.bin", Data: []byte("chunk two"), Append: true},
	"command": CommandRequest{Command: "ls -la", WorkingDir: "src", Env: map[string]string{"B": "2"},
		Timeout: 5 * time.Second, SessionID: goldenID, Owner: "alice"},
	"install":           InstallRequest{Package: "six", Version: "1.16.0", SessionID: goldenID, Owner: "alice"},
	"pause":             pauseArgs{KeepMemory: true, Park: true},
	"resume":            noArgs{},
	"lifetime":          lifetimeArgs{Lifetime: 2 * time.Hour},
	"fork":              forkArgs{Count: 3, Lifetime: time.Hour},
	"snapshot":          snapshotArgs{Name: "before-upgrade"},
	"list_files":        listArgs{Path: "src", Depth: 2},
	"delete_file":       deleteArgs{Path: ".upload-1", EmptyDir: true},
	"move_file":         moveArgs{Path: ".upload-1/big.bin", To: "big.bin"},
	"get":               noArgs{},
	"pause_keep_memory": pauseArgs{KeepMemory: true},
	"pause_files":       pauseArgs{},
	"restart":           noArgs{},
	"close":             noArgs{},
	"metrics":           noArgs{},
	"read_file":         pathArgs{Path: "data/in.txt"},
	"stat_file":         pathArgs{Path: "data/in.txt"},
	"make_dir":          pathArgs{Path: "src/pkg"},
	"list_files_all":    listArgs{},
	"delete_file_tree":  deleteArgs{Path: "data/in.txt"},
	"read_range":        rangeArgs{Path: "data/in.txt", Classify: true},
	"list":              noArgs{},
}

// checkGoldenCall: call is the one named name, with its arguments.
func checkGoldenCall(t *testing.T, name string, call PeerCall) {
	t.Helper()
	wantID, wantKey := goldenID, "alice"
	if name == "list" {
		wantID, wantKey = "", "" // ListSessions asks each replica without its caller
	}
	if call.Owner != "alice" || call.SessionID != wantID || call.Key != wantKey {
		t.Errorf("%s: envelope %+v", name, call)
	}
	row := ops[call.Op]
	if row.peer == nil {
		t.Fatalf("%s: operation %q is not served", name, call.Op)
	}
	got, err := row.peer.decode(call)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if want := goldenArgs[name]; !reflect.DeepEqual(got, want) {
		t.Errorf("%s: arguments\n%#v, want\n%#v", name, got, want)
	}
}

// TestPeerV1CallsDecode: every call a replica of the release before
// sends is read by this one, its session and arguments included.
func TestPeerV1CallsDecode(t *testing.T) {
	golden := goldenV1(t)
	if len(golden) != len(goldenArgs) {
		t.Fatalf("%d golden calls, %d with their arguments", len(golden), len(goldenArgs))
	}
	for name, body := range golden {
		var call PeerCall
		if err := json.Unmarshal(body, &call); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkGoldenCall(t, name, call)
	}
}

// recCluster records the calls the service forwards, and answers null.
type recCluster struct{ calls *[]PeerCall }

func (recCluster) Self() string { return "r1" }
func (c recCluster) Call(_ context.Context, _ string, call PeerCall, _ func(stream, line string)) (json.RawMessage, error) {
	*c.calls = append(*c.calls, call)
	return json.RawMessage("null"), nil
}
func (recCluster) Peers(context.Context) []string                { return []string{"r2"} }
func (recCluster) Claim(context.Context, string) (string, error) { return "r1", nil }
func (recCluster) Release(context.Context, string)               {}

// forwardGoldenCalls makes the calls of testdata/peer through the public
// methods of a service whose sessions are on replica r2, and returns
// what it forwards, by name: the same calls the generator of the golden
// files made with the code of the release before.
func forwardGoldenCalls(t *testing.T) map[string]PeerCall {
	var calls []PeerCall
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	s := &Service{cfg: cfg, cluster: recCluster{&calls}, sessions: session.NewTable(cfg, session.Options{})}
	s.files = s.newFiles()
	s.persist = s.newPersist() // listing includes this replica's parked sessions
	t.Cleanup(s.persist.Close)
	ctx := WithCaller(context.Background(), Caller{Key: "alice", Surface: "rest", RemoteAddr: "10.0.0.7:4242"})
	const id, owner = goldenID, "alice"
	pf := peerFiles{s: s, replica: "r2", owner: owner, id: id}
	out := map[string]PeerCall{}
	for _, c := range []struct {
		name string
		make func()
	}{
		{"execute", func() {
			_, _ = s.Execute(ctx, Request{Code: "print(1)", SessionID: id, Owner: owner, Timeout: 90 * time.Second,
				Profiles: []string{"numpy"}, Env: map[string]string{"A": "1"}, OnOutput: func(string, string) {}})
		}},
		{"write_file", func() {
			_, _ = s.WriteFileWith(ctx, id, owner, "data/in.txt", []byte("hello\x00world"), map[string]string{"k": "v"})
		}},
		{"write_file_append", func() { _ = pf.Write(ctx, ".upload-1/big.bin", []byte("chunk two"), nil, true) }},
		{"command", func() {
			_, _ = s.RunCommand(ctx, CommandRequest{Command: "ls -la", WorkingDir: "src", Env: map[string]string{"B": "2"},
				Timeout: 5 * time.Second, SessionID: id, Owner: owner, OnOutput: func(string, string) {}})
		}},
		{"install", func() {
			_, _ = s.PipInstall(ctx, InstallRequest{Package: "six", Version: "1.16.0", SessionID: id, Owner: owner})
		}},
		{"pause", func() { _, _ = s.PauseSession(ctx, id, owner, PauseMode{KeepMemory: true, Park: true}) }},
		{"resume", func() { _, _, _ = s.ResumeSession(ctx, id, owner) }},
		{"lifetime", func() { _, _ = s.SetSessionLifetime(ctx, id, owner, 2*time.Hour) }},
		{"fork", func() { _, _ = s.ForkSession(ctx, id, owner, 3, time.Hour) }},
		{"snapshot", func() { _, _ = s.SnapshotSession(ctx, id, owner, "before-upgrade") }},
		{"list_files", func() { _, _ = s.ListDir(ctx, id, owner, "src", 2) }},
		{"delete_file", func() { _ = pf.Delete(ctx, ".upload-1", true) }},
		{"move_file", func() { _, _ = pf.Move(ctx, ".upload-1/big.bin", "big.bin") }},
		{"get", func() { _, _ = s.GetSession(ctx, id, owner) }},
		{"list", func() { _ = s.ListSessions(ctx, owner) }},
		{"pause_keep_memory", func() { _, _ = s.PauseSession(ctx, id, owner, PauseMode{KeepMemory: true}) }},
		{"pause_files", func() { _, _ = s.PauseSession(ctx, id, owner, PauseMode{}) }},
		{"restart", func() { _, _ = s.RestartSession(ctx, id, owner) }},
		{"close", func() { _ = s.CloseSession(ctx, id, owner) }},
		{"metrics", func() { _, _ = s.SessionMetrics(ctx, id, owner) }},
		{"read_file", func() { _, _ = s.ReadFile(ctx, id, owner, "data/in.txt") }},
		{"stat_file", func() { _, _ = s.StatFile(ctx, id, owner, "data/in.txt") }},
		{"make_dir", func() { _, _ = s.MakeDir(ctx, id, owner, "src/pkg") }},
		{"list_files_all", func() { _, _ = s.ListFiles(ctx, id, owner, "") }},
		{"delete_file_tree", func() { _ = s.DeleteFile(ctx, id, owner, "data/in.txt") }},
		{"read_range", func() {
			defer func() { _ = recover() }() // a null first chunk: only the call matters
			_, _ = s.OpenFile(ctx, id, owner, "data/in.txt", true)
		}},
	} {
		calls = nil
		c.make()
		if len(calls) != 1 {
			t.Fatalf("%s: %d calls forwarded", c.name, len(calls))
		}
		out[c.name] = calls[0]
	}
	return out
}

// TestPeerCallsBothShapes: what this release forwards is read back whole
// by a replica of this release (the typed shape), and, in the old shape
// it sends a replica not yet known to read that, is what the release
// before sent (testdata/peer), which that release reads.
func TestPeerCallsBothShapes(t *testing.T) {
	golden := goldenV1(t)
	calls := forwardGoldenCalls(t)
	if len(calls) != len(golden) {
		t.Fatalf("%d calls made, %d golden", len(calls), len(golden))
	}
	for name, call := range calls {
		typed, err := json.Marshal(call)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(typed), `"args":{`) {
			t.Errorf("%s: no typed arguments: %s", name, typed)
		}
		var back PeerCall
		if err := json.Unmarshal(typed, &back); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkGoldenCall(t, name, back)

		v1, err := call.V1JSON()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got, want any
		if err := json.Unmarshal(v1, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(golden[name], &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: sent to an old replica\n%s\nwant what the old one sent\n%s", name, v1, golden[name])
		}
	}
}
