package service

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/session"
)

// TestEveryPeerOpIsServed: every operation another replica may send must
// have a row in ops that serves it; a forgotten one breaks only a
// multi-replica deployment, which no other test of this package runs. The
// operations are those a replica of the release before sends
// (testdata/peer, written by its code), which named them all.
func TestEveryPeerOpIsServed(t *testing.T) {
	found := map[string]bool{}
	for name, body := range goldenV1(t) {
		var call PeerCall
		if err := json.Unmarshal(body, &call); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		found[call.Op] = true
	}
	for op := range found {
		if row, ok := ops[op]; !ok || row.peer == nil {
			t.Errorf("%q has no row in ops that serves it", op)
		}
	}
	if len(found) < 21 {
		t.Fatalf("found %d operations in testdata/peer; the old protocol had 21", len(found))
	}
}

// TestForwardDeadlineFromTable: the time a forwarded call may take is
// its queue, its run (the request's timeout, pip's, a restart's start)
// and a margin, as the rows say.
func TestForwardDeadlineFromTable(t *testing.T) {
	cfg := config.DefaultConfig()
	s := &Service{cfg: cfg}
	base := cfg.QueueTimeout + 30*time.Second
	long := cfg.Timeout + time.Hour
	for _, c := range []struct {
		op   string
		args any
		want time.Duration
	}{
		{opExecute, Request{Timeout: long}, base + long},
		{opExecute, Request{}, base + cfg.Timeout},
		{opCommand, CommandRequest{Timeout: long}, base + long},
		{opInstall, InstallRequest{}, base + cfg.PipTimeout},
		{opRestart, nil, base + time.Minute},
		{opWriteFile, writeArgs{}, base},
		{"nope", nil, base},
	} {
		_, run, err := encodeArgs(s, c.op, c.args)
		if err != nil {
			t.Fatalf("%s: %v", c.op, err)
		}
		if got := s.forwardDeadline(run); got != c.want {
			t.Errorf("%s: forward deadline %s, want %s", c.op, got, c.want)
		}
	}
	// Another operation's arguments are a defect, refused before sending.
	if _, _, err := encodeArgs(s, opExecute, CommandRequest{}); err == nil || ErrorKind(err) != KindInternal {
		t.Errorf("execute given a command's request: %v, want an internal error", err)
	}
}

type selfCluster string

func (c selfCluster) Self() string { return string(c) }
func (selfCluster) Call(context.Context, string, PeerCall, func(stream, line string)) (json.RawMessage, error) {
	return nil, errors.New("no peers")
}
func (selfCluster) Peers(context.Context) []string                  { return nil }
func (c selfCluster) Claim(context.Context, string) (string, error) { return string(c), nil }
func (selfCluster) Release(context.Context, string)                 {}

// TestServePeerRefusesUnknownOps: an operation no row serves, or one
// whose request is missing, is an invalid request, not a crash.
func TestServePeerRefusesUnknownOps(t *testing.T) {
	s := &Service{cfg: config.DefaultConfig(), cluster: selfCluster("r1"), sessions: session.NewTable(config.DefaultConfig(), session.Options{})}
	for _, call := range []PeerCall{
		{Op: "nope", SessionID: "sx-r1", Args: json.RawMessage("{}")},
		{Op: opExecute, SessionID: "sx-r1"},
		{Op: opCommand, SessionID: "sx-r1"},
		{Op: opInstall, SessionID: "sx-r1"},
	} {
		_, err := s.ServePeer(context.Background(), call, nil)
		if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "unknown peer operation") {
			t.Errorf("%+v: %v, want an unknown peer operation", call, err)
		}
	}
	// v1 calls without their request are unknown too.
	for _, body := range []string{`{"op":"execute","owner":"a","session_id":"sx-r1"}`, `{"op":"command","owner":"a","command":null,"session_id":"sx-r1"}`} {
		var call PeerCall
		if err := json.Unmarshal([]byte(body), &call); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ServePeer(context.Background(), call, nil); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "unknown peer operation") {
			t.Errorf("%s: %v, want an unknown peer operation", body, err)
		}
	}
	// Arguments of the wrong shape are an invalid request, not a crash.
	bad := PeerCall{Op: opPause, SessionID: "sx-r1", Args: json.RawMessage(`"keep"`)}
	if _, err := s.ServePeer(context.Background(), bad, nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("malformed arguments: %v, want an invalid request", err)
	}
	if _, err := s.ServePeer(context.Background(), PeerCall{Op: opGet, SessionID: "sx-r2"}, nil); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("another replica's session: %v, want not found", err)
	}
}
