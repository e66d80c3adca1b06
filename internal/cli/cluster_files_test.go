package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/pgtest"
)

// TestForwardedFileTransfersStream: a session's files downloaded through
// another replica stream a chunk at a time (its peak RSS, read from the
// host, grows by less than the 60 MB file), come out exact (raw and JSON,
// text and binary, several chunks), and an E2B upload through another
// replica is all or nothing too: one that fails part-way leaves the
// owner's workspace as it was, on the owner's disk.
func TestForwardedFileTransfersStream(t *testing.T) {
	pg := pgtest.Start(t)
	rs, e2bAddr := startE2BReplicas(t, pg.DSN())
	code, info := call(t, "POST", rs[0].url+"/sessions", aliceKey, map[string]any{})
	if code != 201 {
		t.Fatalf("create session: %d %v", code, info)
	}
	id := info["session_id"].(string)
	mk := writeZeros("z", bigFile) +
		"open('t.txt', 'w').write('é€😀 line\\n' * 100000)\n" +
		"open('b.bin', 'wb').write(bytes(range(256)) * 6000)"
	if code, res := call(t, "POST", rs[0].url+"/sessions/"+id+"/execute", aliceKey, map[string]any{"code": mk}); code != 200 || res["success"] != true {
		t.Fatalf("write the files: %d %v", code, res)
	}
	get := func(path, accept string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", rs[1].url+"/sessions/"+id+path, nil)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		return http.DefaultClient.Do(req)
	}
	ws := filepath.Join(rs[0].state, "sessions", id)
	for _, name := range []string{"t.txt", "b.bin"} {
		want, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := get("/files/raw?path="+name, "")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(raw, want) {
			t.Errorf("raw %s through the other replica: %d, %d bytes of %d, equal %v", name, resp.StatusCode, len(raw), len(want), bytes.Equal(raw, want))
		}
		resp, err = get("/files/content?path="+name, "")
		if err != nil {
			t.Fatal(err)
		}
		var fc struct{ Encoding, Content string }
		err = json.NewDecoder(resp.Body).Decode(&fc)
		resp.Body.Close()
		got := []byte(fc.Content)
		if fc.Encoding == "base64" {
			got, _ = base64.StdEncoding.DecodeString(fc.Content)
		}
		wantEnc := map[string]string{"t.txt": "utf-8", "b.bin": "base64"}[name]
		if err != nil || fc.Encoding != wantEnc || !bytes.Equal(got, want) {
			t.Errorf("JSON %s through the other replica: %v, %s, equal %v", name, err, fc.Encoding, bytes.Equal(got, want))
		}
	}

	pid := rs[1].cmd.Process.Pid
	base := resetHWM(t, pid)
	resp, err := get("/files/raw?path=z", "")
	if err != nil {
		t.Fatal(err)
	}
	n, err := countZeros(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || n != bigFile || err != nil {
		t.Fatalf("the 60 MB file through the other replica: %d, %d bytes, %v", resp.StatusCode, n, err)
	}
	if grew := vmHWM(t, pid) - base; grew > mostGrowth {
		t.Errorf("a forwarded download of %d bytes grew the forwarding replica's peak RSS by %d MB", bigFile, grew>>20)
	} else {
		t.Logf("forwarded raw download: peak RSS %d MB -> %d MB", base>>20, (base+grew)>>20)
	}
	if code, res := call(t, "DELETE", rs[1].url+"/sessions/"+id+"/files/content?path=z", aliceKey, nil); code != 204 {
		t.Fatalf("delete: %d %v", code, res)
	}

	// E2B: a sandbox made through replica 0, uploaded to through replica 1.
	created := createE2BSandbox(t, "http://"+e2bAddr[0], aliceKey, 120)
	box := created["sandboxID"].(string)
	upload := func(names []string, size int) (int, string) {
		body, ct := uploadForm(names, size)
		req, _ := http.NewRequest("POST", "http://"+e2bAddr[1]+"/files", body)
		req.Header.Set("Content-Type", ct)
		req.Header.Set("E2b-Sandbox-Id", box)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", created["envdAccessToken"].(string))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	if code, out := upload([]string{"/home/user/keep.txt", "/home/user/a/b.txt"}, 3<<20); code != 200 || !strings.Contains(out, "/home/user/a/b.txt") {
		t.Fatalf("an upload through the other replica: %d %s", code, out)
	}
	boxDir := filepath.Join(rs[0].state, "sessions", box)
	before := treeOf(t, boxDir)
	if !strings.Contains(before, "a/b.txt ") || !strings.Contains(before, "keep.txt ") {
		t.Fatalf("the forwarded upload is not on the owner's disk:\n%s", before)
	}
	// 30 files of 3 MiB into what is left of 64 MiB: it fails part-way.
	names := []string{"/home/user/keep.txt"}
	for i := range 29 {
		names = append(names, fmt.Sprintf("/home/user/new/deep/f%02d", i))
	}
	if code, out := upload(names, 3<<20); code != http.StatusInsufficientStorage {
		t.Fatalf("an upload that fills the workspace, through the other replica: %d %s", code, out)
	}
	if after := treeOf(t, boxDir); after != before {
		t.Errorf("a failed forwarded upload changed the workspace:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// treeOf lists a directory on the host: each entry and its content's hash.
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			out = append(out, rel+"/")
			return nil
		}
		data, _ := os.ReadFile(p)
		out = append(out, fmt.Sprintf("%s %x", rel, sha256.Sum256(data)))
		return nil
	})
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// uploadForm is a multipart form of "file" parts, each size bytes.
func uploadForm(names []string, size int) (*bytes.Buffer, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, name := range names {
		w, _ := mw.CreateFormFile("file", name)
		_, _ = w.Write(bytes.Repeat([]byte{'u'}, size))
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}
