package service

import (
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/session"
)

// TestEveryPeerOpIsServed: an Op* constant another replica may send must
// have a row in ops that serves it; a forgotten one breaks only a
// multi-replica deployment, which no other test of this package runs.
func TestEveryPeerOpIsServed(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "cluster.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			for i, name := range v.Names {
				if !strings.HasPrefix(name.Name, "Op") || i >= len(v.Values) {
					continue
				}
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s is not a string literal", name.Name)
				}
				op, _ := strconv.Unquote(lit.Value)
				found++
				if row, ok := ops[op]; !ok || row.serve == nil {
					t.Errorf("%s (%q) has no row in ops that serves it", name.Name, op)
				}
			}
		}
	}
	if found < 16 {
		t.Fatalf("found %d Op constants in cluster.go; the parse missed some", found)
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
		call PeerCall
		want time.Duration
	}{
		{PeerCall{Op: OpExecute, Execute: &Request{Timeout: long}}, base + long},
		{PeerCall{Op: OpExecute, Execute: &Request{}}, base + cfg.Timeout},
		{PeerCall{Op: OpCommand, Command: &CommandRequest{Timeout: long}}, base + long},
		{PeerCall{Op: OpInstall, Install: &InstallRequest{}}, base + cfg.PipTimeout},
		{PeerCall{Op: OpRestart}, base + time.Minute},
		{PeerCall{Op: OpWriteFile}, base},
		{PeerCall{Op: OpExecute}, base}, // malformed: refused by the owner at once
		{PeerCall{Op: "nope"}, base},
	} {
		if got := s.forwardDeadline(c.call); got != c.want {
			t.Errorf("%s: forward deadline %s, want %s", c.call.Op, got, c.want)
		}
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
		{Op: "nope", SessionID: "sx-r1"},
		{Op: OpExecute, SessionID: "sx-r1"},
		{Op: OpCommand, SessionID: "sx-r1"},
		{Op: OpInstall, SessionID: "sx-r1"},
	} {
		_, err := s.ServePeer(context.Background(), call, nil)
		if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "unknown peer operation") {
			t.Errorf("%+v: %v, want an unknown peer operation", call, err)
		}
	}
	if _, err := s.ServePeer(context.Background(), PeerCall{Op: OpGet, SessionID: "sx-r2"}, nil); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("another replica's session: %v, want not found", err)
	}
}
