package e2b_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"connectrpc.com/connect"

	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/service"
)

// ListDir is bounded: a directory wider than a listing gives the first
// service.MaxListedFiles entries and the truncated header (envd's answer
// has entries only); a depth past the cap is an invalid argument.
func TestListDirIsBoundedAndSaysSo(t *testing.T) {
	srv, svc := newServer(t)
	status, created := call(t, "POST", srv.URL+"/v2/sandboxes", `{"templateID": "base", "timeout": 60}`, map[string]string{"X-API-KEY": aliceKey})
	if status != 201 {
		t.Fatalf("create: %d %v", status, created)
	}
	id, token := created["sandboxID"].(string), created["envdAccessToken"].(string)
	// Planted from the host: what code could leave in its workspace.
	wide := filepath.Join(svc.Config().StateDir, "sessions", id, "w")
	if err := os.Mkdir(wide, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range service.MaxListedFiles + 50 {
		if err := os.WriteFile(filepath.Join(wide, strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("E2b-Sandbox-Id", id)
			req.Header().Set("E2b-Sandbox-Port", "49983")
			req.Header().Set("X-Access-Token", token)
			return next(ctx, req)
		}
	}))
	list := connect.NewClient[map[string]any, map[string]any](http.DefaultClient, srv.URL+"/filesystem.Filesystem/ListDir",
		connect.WithProtoJSON(), connect.WithCodec(testCodec{}), in)
	ctx := context.Background()
	res, err := list.CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "/home/user/w", "depth": 1}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len((*res.Msg)["entries"].([]any)); n != service.MaxListedFiles || res.Header().Get(e2b.TruncatedHeader) != "true" {
		t.Fatalf("a wide directory: %d entries, %s %q", n, e2b.TruncatedHeader, res.Header().Get(e2b.TruncatedHeader))
	}
	if _, ok := (*res.Msg)["truncated"]; ok {
		t.Fatal("the answer has a field envd's has not")
	}
	res, err = list.CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "/home/user", "depth": 1}))
	if err != nil || len((*res.Msg)["entries"].([]any)) != 1 || res.Header().Get(e2b.TruncatedHeader) != "" {
		t.Fatalf("the home: %v %v", res, err)
	}
	_, err = list.CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "/home/user", "depth": service.MaxListDepth + 1}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Fatalf("a depth over the cap: %v", err)
	}
}
