package e2b_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/service"
)

// snapshot is what a workspace holds, read on the host: each entry's
// path, and its content's hash (or "dir").
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%x", sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// multipartBody is a form of "file" parts, one per name, each size bytes.
func multipartBody(t *testing.T, names []string, size int) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i, name := range names {
		w, err := mw.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(bytes.Repeat([]byte{byte('a' + i%26)}, size))
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

// TestMultipartUploadIsAllOrNothing: an upload of 300 files that fills
// the workspace part-way is refused (507) and leaves the workspace as it
// was, read from the host: no file of it, no directory it made, no
// temporary file, and the existing file it would have replaced intact.
// An upload that fits writes every file, replacing and creating.
func TestMultipartUploadIsAllOrNothing(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.SessionPoolSize = 0, 0
	cfg.MachinePoolSize = 0
	cfg.WorkspaceMax = 2 << 20
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	keys, _ := access.ParseKeys("alice:" + aliceKey)
	srv := httptest.NewServer(e2b.New(svc, e2b.Options{Keys: keys, Config: cfg}))
	t.Cleanup(srv.Close)

	status, created := call(t, "POST", srv.URL+"/v2/sandboxes", `{"templateID": "base", "timeout": 60}`, map[string]string{"X-API-KEY": aliceKey})
	if status != 201 {
		t.Fatalf("create: %d %v", status, created)
	}
	id, token := created["sandboxID"].(string), created["envdAccessToken"].(string)
	upload := func(query string, body io.Reader, contentType string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/files"+query, body)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	for name, content := range map[string]string{"keep.txt": "kept", "old/a.txt": "the old a"} {
		if status, out := upload("?path=/home/user/"+name, strings.NewReader(content), "application/octet-stream"); status != 200 {
			t.Fatalf("upload %s: %d %s", name, status, out)
		}
	}
	ws := filepath.Join(cfg.StateDir, "sessions", id)
	before := snapshot(t, ws)
	if len(before) != 3 {
		t.Fatalf("the workspace on the host: %v", before)
	}

	// 300 files of 16 KiB into 2 MiB: the workspace fills about half-way.
	names := []string{"/home/user/old/a.txt"}
	for i := range 299 {
		names = append(names, fmt.Sprintf("/home/user/new/deep/f%03d.bin", i))
	}
	body, ct := multipartBody(t, names, 16<<10)
	status, out := upload("", body, ct)
	if status != http.StatusInsufficientStorage || !strings.Contains(out, "SANDBOX_WORKSPACE_SIZE") {
		t.Fatalf("the upload that fills the workspace: %d %s", status, out)
	}
	if after := snapshot(t, ws); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a failed upload changed the workspace:\nbefore %v\nafter  %v", before, after)
	}

	// One that fits: every file, in place.
	body, ct = multipartBody(t, []string{"/home/user/old/a.txt", "/home/user/new/b.txt", "~/new/c/d.txt"}, 100)
	status, out = upload("", body, ct)
	var written []map[string]string
	_ = json.Unmarshal([]byte(out), &written)
	if status != 200 || len(written) != 3 || written[2]["path"] != "/home/user/new/c/d.txt" {
		t.Fatalf("the upload that fits: %d %s", status, out)
	}
	after := snapshot(t, ws)
	for _, p := range []string{"old/a.txt", "new/b.txt", "new/c/d.txt"} {
		data, err := os.ReadFile(filepath.Join(ws, p))
		if err != nil || len(data) != 100 {
			t.Errorf("%s after the upload: %d bytes, %v", p, len(data), err)
		}
	}
	for p := range after {
		if strings.Contains(p, ".codecage-upload-") {
			t.Errorf("a temporary file was left: %s", p)
		}
	}
	if after["keep.txt"] != before["keep.txt"] {
		t.Errorf("keep.txt changed")
	}
}
