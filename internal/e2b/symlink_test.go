package e2b_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// Symlinks are described as envd describes them: by the resolved
// absolute path and the target's type and permissions (never
// FILE_TYPE_SYMLINK, which e2b Python <= 2.34 cannot parse). They are
// resolved in the sandbox's view only (its workspace, /tmp and read-only
// system tree): a dangling, looping or escaping link is a broken one
// (itself as its target, no type), and nothing of the host beyond that
// view shows, however the link is written.
func TestSymlinksListLikeEnvd(t *testing.T) {
	srv, svc := newServer(t)
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	ws := filepath.Join(svc.Config().StateDir, "sessions", b.id)
	stateDir := svc.Config().StateDir
	// Planted from the host: what code could leave in its workspace.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(ws, "data.txt"), []byte("x"), 0o640))
	must(os.Mkdir(filepath.Join(ws, "sub"), 0o750))
	for name, target := range map[string]string{
		"file":     "data.txt",           // relative
		"dir":      "/home/user/sub",     // absolute, as the sandbox sees it
		"chain":    "sub/../file",        // a link to a link
		"inner":    "sub",                // a parent that is a link: resolved
		"dangling": "nothing",            // to nothing
		"loop":     "loop",               // to itself
		"etc":      "/etc",               // out of the workspace, in the sandbox
		"host":     stateDir,             // the host's state directory, a real directory
		"up":       "../../../../../../", // out by ..
		"upstate":  "/home/user/../../.." + stateDir,
	} {
		must(os.Symlink(target, filepath.Join(ws, name)))
	}
	in := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("E2b-Sandbox-Id", b.id)
			req.Header().Set("E2b-Sandbox-Port", "49983")
			req.Header().Set("X-Access-Token", b.token)
			return next(ctx, req)
		}
	}))
	list := connect.NewClient[map[string]any, map[string]any](http.DefaultClient, srv.URL+"/filesystem.Filesystem/ListDir",
		connect.WithProtoJSON(), connect.WithCodec(testCodec{}), in)
	stat := connect.NewClient[map[string]any, map[string]any](http.DefaultClient, srv.URL+"/filesystem.Filesystem/Stat",
		connect.WithProtoJSON(), connect.WithCodec(testCodec{}), in)
	res, err := list.CallUnary(context.Background(), connect.NewRequest(&map[string]any{"path": "/home/user", "depth": 1}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]any{}
	for _, e := range (*res.Msg)["entries"].([]any) {
		m := e.(map[string]any)
		got[m["name"].(string)] = m
		if strings.Contains(fmt.Sprint(m), stateDir) {
			t.Errorf("an entry names the host's path: %v", m)
		}
	}
	want := map[string][3]any{ // type, symlinkTarget, mode
		"file":     {"FILE_TYPE_FILE", "/home/user/data.txt", float64(0o640)},
		"dir":      {"FILE_TYPE_DIRECTORY", "/home/user/sub", float64(0o750)},
		"chain":    {"FILE_TYPE_FILE", "/home/user/data.txt", float64(0o640)},
		"inner":    {"FILE_TYPE_DIRECTORY", "/home/user/sub", float64(0o750)},
		"dangling": {"FILE_TYPE_UNSPECIFIED", "/home/user/dangling", nil},
		"loop":     {"FILE_TYPE_UNSPECIFIED", "/home/user/loop", nil},
		// The sandbox's own /etc and / (directories of its view), not the host's.
		"etc":     {"FILE_TYPE_DIRECTORY", "/etc", float64(0o755)},
		"host":    {"FILE_TYPE_UNSPECIFIED", "/home/user/host", nil},
		"up":      {"FILE_TYPE_DIRECTORY", "/", float64(0o755)},
		"upstate": {"FILE_TYPE_UNSPECIFIED", "/home/user/upstate", nil},
	}
	for name, w := range want {
		e := got[name]
		if e == nil {
			t.Errorf("%s: not listed", name)
			continue
		}
		mode := e["mode"]
		if mode == float64(0) {
			mode = nil
		}
		if e["type"] != w[0] || e["symlinkTarget"] != w[1] || mode != w[2] {
			t.Errorf("%s: type %v, symlinkTarget %v, mode %v; want %v", name, e["type"], e["symlinkTarget"], e["mode"], w)
		}
	}
	// Stat (getInfo) says the same.
	sres, err := stat.CallUnary(context.Background(), connect.NewRequest(&map[string]any{"path": "/home/user/dir"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := (*sres.Msg)["entry"].(map[string]any); e["type"] != "FILE_TYPE_DIRECTORY" || e["symlinkTarget"] != "/home/user/sub" {
		t.Errorf("stat of a link to a directory: %v", e)
	}
	sres, err = stat.CallUnary(context.Background(), connect.NewRequest(&map[string]any{"path": "/home/user/host"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := (*sres.Msg)["entry"].(map[string]any); e["type"] != "FILE_TYPE_UNSPECIFIED" || e["symlinkTarget"] != "/home/user/host" {
		t.Errorf("stat of a link to the host: %v", e)
	}
}
