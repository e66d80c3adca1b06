package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// replicaR2 is a cluster of one: this service is replica r2.
type replicaR2 struct{}

func (replicaR2) Self() string { return "r2" }
func (replicaR2) Call(context.Context, string, service.PeerCall, func(stream, line string)) (json.RawMessage, error) {
	return nil, errors.New("no peers")
}
func (replicaR2) Peers(context.Context) []string                { return nil }
func (replicaR2) Claim(context.Context, string) (string, error) { return "r2", nil }
func (replicaR2) Release(context.Context, string)               {}

// v1Replica serves the golden calls (testdata/peer) on one session of a
// service that is replica r2.
type v1Replica struct {
	t   *testing.T
	svc *service.Service
	id  string
}

// serve serves the golden call name, and decodes its answer, as it
// travels, into into (nil: none wanted).
func (r v1Replica) serve(name string, into any) error {
	t := r.t
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", "peer", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	body = []byte(strings.ReplaceAll(string(body), "sabc123-r2", r.id))
	var call service.PeerCall
	if err := json.Unmarshal(body, &call); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	res, err := r.svc.ServePeer(context.Background(), call, func(string, string) {})
	if err != nil {
		return err
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if into != nil {
		if err := json.Unmarshal(raw, into); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return nil
}

func (r v1Replica) must(name string, into any) {
	r.t.Helper()
	if err := r.serve(name, into); err != nil {
		r.t.Fatalf("%s: %v", name, err)
	}
}

// TestServePeerV1Golden: a replica of this release serves the calls a
// replica of the release before sends (testdata/peer, written by its
// code) on a real session, as it would have: a rolling upgrade keeps
// answering.
func TestServePeerV1Golden(t *testing.T) {
	svc := newServiceOpts(t, service.LeanTestConfig(), &service.Options{Cluster: replicaR2{}})
	info, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(info.ID, "-r2") {
		t.Fatalf("session id %q does not name replica r2", info.ID)
	}
	r := v1Replica{t: t, svc: svc, id: info.ID}
	serveV1Files(r)
	serveV1Runs(r)
	serveV1Session(r)
}

// serveV1Files: the file operations, uploads and downloads included.
func serveV1Files(r v1Replica) {
	t, svc, ctx := r.t, r.svc, context.Background()
	var fi service.FileInfo
	r.must("write_file", &fi)
	if fi.Path != "data/in.txt" || fi.Size != int64(len("hello\x00world")) {
		t.Fatalf("write_file: %+v", fi)
	}
	var data []byte
	r.must("read_file", &data)
	if string(data) != "hello\x00world" {
		t.Fatalf("read_file: %q", data)
	}
	r.must("stat_file", &fi)
	if fi.Size != int64(len(data)) {
		t.Fatalf("stat_file: %+v", fi)
	}
	var chunk struct {
		Data []byte `json:"data"`
	}
	r.must("read_range", &chunk)
	if string(chunk.Data) != "hello\x00world" {
		t.Fatalf("read_range: %q", chunk.Data)
	}
	// An upload's later chunk is appended to its first.
	if _, err := svc.WriteFile(ctx, r.id, "alice", ".upload-1/big.bin", []byte("chunk one, ")); err != nil {
		t.Fatal(err)
	}
	r.must("write_file_append", nil)
	r.must("move_file", &fi)
	if got, err := svc.ReadFile(ctx, r.id, "alice", "big.bin"); err != nil || string(got) != "chunk one, chunk two" {
		t.Fatalf("the upload moved into place: %q, %v", got, err)
	}
	r.must("delete_file", nil) // the upload's empty directory
	var made bool
	r.must("make_dir", &made)
	if !made {
		t.Fatal("make_dir: src/pkg was there already")
	}
	var list service.FileList
	r.must("list_files", &list)
	if len(list.Files) != 1 || list.Files[0].Path != "src/pkg" {
		t.Fatalf("list_files src, depth 2: %+v", list)
	}
	r.must("delete_file_tree", nil)
	if _, err := svc.StatFile(ctx, r.id, "alice", "data/in.txt"); !errors.Is(err, service.ErrFileNotFound) {
		t.Fatalf("after delete_file: %v", err)
	}
}

// serveV1Runs: a command, and a run.
func serveV1Runs(r v1Replica) {
	t := r.t
	var cmd service.CommandResult
	r.must("command", &cmd)
	if !cmd.Success || !strings.Contains(cmd.Stdout, "pkg") {
		t.Fatalf("command ls -la in src: %+v", cmd)
	}
	// The old execute asks for a profile, which a session's run may not
	// choose: refused as the same request made here is.
	err := r.serve("execute", nil)
	req := service.Request{Code: "print(1)", SessionID: r.id, Owner: "alice", Profiles: []string{"numpy"}}
	if _, direct := r.svc.Execute(context.Background(), req); !errors.Is(err, service.ErrInvalidRequest) || direct == nil || err.Error() != direct.Error() {
		t.Fatalf("execute with a profile: %v, want the refusal %v", err, direct)
	}
}

// serveV1Session: pause, resume, lifetime, get, list, restart, close.
func serveV1Session(r v1Replica) {
	t := r.t
	var got service.SessionInfo
	r.must("pause_keep_memory", &got)
	if got.State != "paused" {
		t.Fatalf("pause keeping memory: %+v", got)
	}
	var res struct {
		Info    *service.SessionInfo `json:"info"`
		Resumed bool                 `json:"resumed"`
	}
	r.must("resume", &res)
	if !res.Resumed || res.Info.State != "running" {
		t.Fatalf("resume: %+v", res)
	}
	r.must("lifetime", nil)
	r.must("get", &got)
	if got.ID != r.id || got.ExpiresAt.Sub(got.CreatedAt) < 110*time.Minute {
		t.Fatalf("get after a lifetime of 2 h: %+v", got)
	}
	var sessions []service.SessionInfo
	r.must("list", &sessions)
	if len(sessions) != 1 || sessions[0].ID != r.id {
		t.Fatalf("list: %+v", sessions)
	}
	r.must("restart", &got)
	r.must("close", nil)
	if _, err := r.svc.GetSession(context.Background(), r.id, "alice"); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("after close: %v", err)
	}
}
