package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// The file API reaches the session's filesystem as its code sees it: a
// file the interpreter writes to /tmp is read through the file API, and
// one the file API writes there is read by the code; the read-only
// system tree is readable; symlinks planted in /tmp are followed in the
// sandbox's terms (a link to /etc/shadow never yields the host's, judged
// by comparing with the host file); writes outside /home/user and /tmp
// are refused with ErrPermission, and the host tree is left unchanged.
func TestFileAPIReachesTmpAndSystemTree(t *testing.T) {
	if testBackend(t) != config.IsolationNative {
		t.Skip("a gVisor session's /tmp is its sandbox's own: the file API refuses it (view.go noTmp)")
	}
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.EnableFilesystem = true
	cfg.StateDir = t.TempDir()
	cfg.SessionPoolSize = 0
	cfg.MachinePoolSize = 0
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	s, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Home: "/home/user"})
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID
	code := `import os
open('/tmp/from-code.txt', 'w').write('written by runCode')
os.symlink('/etc/shadow', '/tmp/shadow')
os.symlink('/etc/hostname', '/tmp/hostname')
os.symlink('../home/user/ws.txt', '/tmp/to-ws')
os.symlink('` + cfg.StateDir + `', '/tmp/state')
open('/home/user/ws.txt', 'w').write('in the workspace')
"ok"`
	if res, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: "o", Code: code}); err != nil || !res.Success {
		t.Fatalf("setup: %v %+v %+v", err, res, res.Error)
	}
	if b, err := svc.ReadFile(ctx, id, "o", "/tmp/from-code.txt"); err != nil || string(b) != "written by runCode" {
		t.Fatalf("read /tmp/from-code.txt: %q %v", b, err)
	}
	// The other way: the file API writes /tmp, the code reads it.
	if fi, err := svc.WriteFile(ctx, id, "o", "/tmp/d/from-api.txt", []byte("from the API")); err != nil || fi.Path != "/tmp/d/from-api.txt" {
		t.Fatalf("write /tmp: %+v %v", fi, err)
	}
	res, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: "o", Code: "open('/tmp/d/from-api.txt').read()"})
	if err != nil || !strings.Contains(string(res.Result), "from the API") {
		t.Fatalf("the code does not see the API's /tmp file: %v %+v", err, res)
	}
	list, err := svc.ListDir(ctx, id, "o", "/tmp", 1)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]service.FileInfo{}
	for _, f := range list.Files {
		names[f.Path] = f
	}
	if _, ok := names["/tmp/from-code.txt"]; !ok || !names["/tmp/d"].Dir {
		t.Fatalf("listing of /tmp: %+v", list.Files)
	}
	if l := names["/tmp/to-ws"]; !l.Symlink || l.Link == nil || l.Link.Path != "/home/user/ws.txt" {
		t.Fatalf("/tmp/to-ws: %+v %+v", l, l.Link)
	}
	// A link to /etc/shadow leads to the sandbox's /etc/shadow, which the
	// view does not hold: refused, never the host's file.
	host, _ := os.ReadFile("/etc/shadow")
	for _, p := range []string{"/tmp/shadow", "/tmp/state/sessions/" + id + "/ws.txt", "/etc/shadow", "/tmp/../etc/shadow"} {
		b, err := svc.ReadFile(ctx, id, "o", p)
		if err == nil || (len(host) > 0 && strings.Contains(string(b), string(host[:min(len(host), 20)]))) {
			t.Fatalf("read %s: %q %v", p, b, err)
		}
		// Refused, or absent from the sandbox's /tmp (the state directory's
		// path names nothing there): never the host's file.
		if !errors.Is(err, service.ErrBadPath) && !errors.Is(err, service.ErrFileNotFound) {
			t.Fatalf("read %s: %v, want a bad path or not found", p, err)
		}
	}
	if l := names["/tmp/shadow"]; !l.Symlink || l.Link != nil {
		t.Fatalf("/tmp/shadow described as leading somewhere: %+v %+v", l, l.Link)
	}
	// Through a link inside the view: the workspace's file.
	if b, err := svc.ReadFile(ctx, id, "o", "/tmp/to-ws"); err != nil || string(b) != "in the workspace" {
		t.Fatalf("read /tmp/to-ws: %q %v", b, err)
	}
	// Writing through a link to /etc/hostname: refused, the host's file unchanged.
	before, _ := os.ReadFile("/etc/hostname")
	if _, err := svc.WriteFile(ctx, id, "o", "/tmp/hostname", []byte("pwned")); err == nil {
		t.Fatal("a write through /tmp/hostname -> /etc/hostname succeeded")
	}
	if after, _ := os.ReadFile("/etc/hostname"); string(after) != string(before) {
		t.Fatalf("the host's /etc/hostname changed: %q", after)
	}
	// The read-only system tree: readable, as the sandbox's own code reads it.
	want, err := os.ReadFile("/usr/lib/os-release")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := svc.ReadFile(ctx, id, "o", "/usr/lib/os-release"); err != nil || string(b) != string(want) {
		t.Fatalf("read /usr/lib/os-release: %v", err)
	}
	bin, err := svc.ListDir(ctx, id, "o", "/bin", 1) // Debian's /bin -> usr/bin
	if err != nil || len(bin.Files) < 10 || !strings.HasPrefix(bin.Files[0].Path, "/usr/bin/") {
		t.Fatalf("list /bin: %v %d", err, len(bin.Files))
	}
	root, err := svc.ListDir(ctx, id, "o", "/", 1)
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	for _, f := range root.Files {
		top[f.Path] = true
	}
	if !top["/home"] || !top["/tmp"] || !top["/usr"] || top["/root"] || top["/proc"] {
		t.Fatalf("listing of /: %+v", root.Files)
	}
	// Writes outside /home/user and /tmp: ErrPermission, nothing on the host.
	for _, p := range []string{"/usr/codecage-view-test", "/etc/codecage-view-test", "/codecage-view-test", "/usr/lib/os-release"} {
		_, err := svc.WriteFile(ctx, id, "o", p, []byte("x"))
		if !errors.Is(err, service.ErrPermission) || service.ErrorKind(err) != service.KindPermissionDenied {
			t.Fatalf("write %s: %v, want permission denied", p, err)
		}
		if _, err := svc.MakeDir(ctx, id, "o", p+"-dir"); !errors.Is(err, service.ErrPermission) {
			t.Fatalf("mkdir %s: %v, want permission denied", p, err)
		}
		if err := svc.DeleteFile(ctx, id, "o", p); !errors.Is(err, service.ErrPermission) {
			t.Fatalf("delete %s: %v, want permission denied", p, err)
		}
	}
	if _, err := os.Stat("/usr/codecage-view-test"); err == nil {
		t.Fatal("a file appeared in the host's /usr")
	}
	if b, _ := os.ReadFile("/usr/lib/os-release"); string(b) != string(want) {
		t.Fatal("the host's /usr/lib/os-release changed")
	}
	// From the host: the API's /tmp file is in the session's /tmp, as its uid.
	fi, err := os.Stat(filepath.Join(cfg.StateDir, "sessions", id+".tmp", "d", "from-api.txt"))
	if err != nil {
		t.Fatalf("the API's /tmp file is not in the session's /tmp: %v", err)
	}
	if fi.Sys().(*syscall.Stat_t).Uid == 0 {
		t.Fatal("the API's /tmp file belongs to root, not the session's uid")
	}
	// Removing from /tmp.
	if err := svc.DeleteFile(ctx, id, "o", "/tmp/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.StatFile(ctx, id, "o", "/tmp/d"); !errors.Is(err, service.ErrFileNotFound) {
		t.Fatalf("stat after delete: %v", err)
	}
}

// Metadata is kept with the file, as user.e2b.* extended attributes (as
// envd keeps it), read back by stat and list, replaced by each write, and
// bounded.
func TestFileMetadata(t *testing.T) {
	svc := sessionService(t)
	ctx := context.Background()
	s, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Home: "/home/user"})
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID
	fi, err := svc.WriteFileWith(ctx, id, "o", "m.txt", []byte("x"), map[string]string{"Owner": "alice", "tag": "a b"})
	if err != nil || fi.Metadata["owner"] != "alice" || fi.Metadata["tag"] != "a b" || len(fi.Metadata) != 2 {
		t.Fatalf("write: %+v %v", fi, err)
	}
	st, err := svc.StatFile(ctx, id, "o", "/home/user/m.txt")
	if err != nil || st.Metadata["owner"] != "alice" {
		t.Fatalf("stat: %+v %v", st, err)
	}
	l, err := svc.ListDir(ctx, id, "o", ".", 1)
	if err != nil || len(l.Files) != 1 || l.Files[0].Metadata["tag"] != "a b" {
		t.Fatalf("list: %+v %v", l, err)
	}
	// A write without metadata replaces it with none, as envd's does.
	if fi, err := svc.WriteFile(ctx, id, "o", "m.txt", []byte("y")); err != nil || fi.Metadata != nil {
		t.Fatalf("overwrite: %+v %v", fi, err)
	}
	for _, bad := range []map[string]string{{"a b": "x"}, {"k": "caf\u00e9"}, {strings.Repeat("k", 200): "x"}, {"k": strings.Repeat("v", 20000)}} {
		if _, err := svc.WriteFileWith(ctx, id, "o", "bad.txt", []byte("x"), bad); !errors.Is(err, service.ErrInvalidRequest) {
			t.Fatalf("metadata %.40v: %v", bad, err)
		}
	}
	many := map[string]string{}
	for i := range service.MaxMetadataKeys + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	if _, err := svc.WriteFileWith(ctx, id, "o", "bad.txt", []byte("x"), many); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("too many keys: %v", err)
	}
	// The code may set its own (as in E2B's VM): read back, within bounds.
	code := `import os
open('/home/user/c.txt', 'w').write('c')
os.setxattr('/home/user/c.txt', 'user.e2b.from-code', b'yes')
for i in range(200):
    os.setxattr('/home/user/c.txt', 'user.e2b.k%d' % i, b'v' * 1000)
"ok"`
	if res, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: "o", Code: code}); err != nil || !res.Success {
		t.Fatalf("setxattr in the sandbox: %v %+v", err, res)
	}
	st, err = svc.StatFile(ctx, id, "o", "c.txt")
	if err != nil || len(st.Metadata) == 0 || len(st.Metadata) > service.MaxMetadataKeys {
		t.Fatalf("stat of code-set metadata: %d keys, %v", len(st.Metadata), err)
	}
	total := 0
	for k, v := range st.Metadata {
		total += len(k) + len(v)
	}
	if total > 2*service.MaxMetadataBytes {
		t.Fatalf("metadata read back unbounded: %d bytes", total)
	}
}
