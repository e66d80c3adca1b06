package cli

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// bigFile is the download of these tests: 60 MB of NUL bytes, which a
// server holding whole files in memory (and JSON-escaping each byte as
// \u0000) turned into gigabytes.
const bigFile = 60_000_000

// writeZeros is Python code that writes n NUL bytes to path from one
// written 1 MiB buffer. bytes(n) is calloc'd memory never written: on a
// PVM guest (no shared zero page) reading it to write the file costs n
// bytes of anonymous memory on top of n bytes of tmpfs page cache, and
// 2 x 60 MB does not fit a 128 MiB session.
func writeZeros(path string, n int) string {
	return fmt.Sprintf("b = bytearray(1 << 20)\nwith open(%q, 'wb') as f:\n    for i in range(0, %d, len(b)):\n        f.write(b[:%d - i])\n", path, n, n)
}

// mostGrowth bounds the server's peak RSS growth during a download: less
// than the file itself, so no copy of it can be whole in memory.
const mostGrowth = 40 << 20

// vmHWM is the peak resident memory of process pid (VmHWM), in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q", rest)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// resetHWM starts the peak over from the current RSS (clear_refs 5).
func resetHWM(t *testing.T, pid int) int64 {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	return vmHWM(t, pid)
}

// e2bServer is `codecage serve` with the E2B surface on too.
func e2bServer(t *testing.T, env ...string) (*server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e2bAddr := l.Addr().String()
	l.Close()
	s := startServe(t, append([]string{"SANDBOX_E2B_LISTEN=" + e2bAddr, "SANDBOX_STATE_DIR=" + t.TempDir(),
		"SANDBOX_AUDIT_DB=" + t.TempDir() + "/audit.db", "SANDBOX_POOL_SIZE=0", "SANDBOX_DATA_SCIENCE_POOL_SIZE=0",
		"SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0", "SANDBOX_RATE_LIMIT=0"}, env...)...)
	return s, "http://" + e2bAddr
}

// sessionWithBigFile makes a REST session whose workspace holds z, bigFile
// NUL bytes, written by the code.
func sessionWithBigFile(t *testing.T, s *server) string {
	t.Helper()
	code, info := call(t, "POST", s.url+"/sessions", "", map[string]any{})
	if code != 201 {
		t.Fatalf("create session: %d %v", code, info)
	}
	id := info["session_id"].(string)
	if code, res := call(t, "POST", s.url+"/sessions/"+id+"/execute", "", map[string]any{"code": writeZeros("z", bigFile)}); code != 200 || res["success"] != true {
		t.Fatalf("write the file: %d %v", code, res)
	}
	return id
}

// e2bSandbox makes an E2B sandbox whose home holds z, bigFile NUL bytes;
// it returns the headers that reach its daemon.
func e2bSandbox(t *testing.T, e2bURL string) http.Header {
	t.Helper()
	created := createE2BSandbox(t, e2bURL, "e2b_anyone", 120)
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", created["sandboxID"].(string))
	if tok, ok := created["envdAccessToken"].(string); ok {
		h.Set("X-Access-Token", tok)
	}
	body, _ := json.Marshal(map[string]string{"code": writeZeros("/home/user/z", bigFile)})
	req, _ := http.NewRequest("POST", e2bURL+"/execute", bytes.NewReader(body))
	req.Header = h.Clone()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Port", "49999")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(out), `"error"`) {
		t.Fatalf("write the file: %d %s", resp.StatusCode, out)
	}
	h.Set("E2b-Sandbox-Port", "49983")
	return h
}

// countZeros reads r to its end and counts its bytes, failing on one that
// is not NUL.
func countZeros(r io.Reader) (int64, error) {
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		for _, b := range buf[:k] {
			if b != 0 {
				return n, fmt.Errorf("byte %d is %#x", n, b)
			}
			n++
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// TestDownloadsStreamWithBoundedMemory: a 60 MB file downloaded over
// REST (JSON, then raw bytes) and 10 times at once over E2B's GET /files
// leaves the peak RSS of the `codecage serve` process (VmHWM, read from
// the host) within less than the file's size; the JSON form is base64
// (4/3 of the file), never one \u0000 escape per byte.
func TestDownloadsStreamWithBoundedMemory(t *testing.T) {
	s, e2bURL := e2bServer(t, "SANDBOX_MAX_TRANSFERS=16")
	pid := s.cmd.Process.Pid
	id := sessionWithBigFile(t, s)
	h := e2bSandbox(t, e2bURL)

	base := resetHWM(t, pid)
	resp, err := http.Get(s.url + "/sessions/" + id + "/files/content?path=z")
	if err != nil {
		t.Fatal(err)
	}
	var fc struct {
		Path, Encoding, Content string
		Size                    int64
	}
	err = json.NewDecoder(resp.Body).Decode(&fc)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || fc.Encoding != "base64" || fc.Size != bigFile || fc.Path != "z" {
		t.Errorf("JSON: %d %v, encoding %q size %d path %q", resp.StatusCode, err, fc.Encoding, fc.Size, fc.Path)
	} else if n, err := countZeros(base64.NewDecoder(base64.StdEncoding, strings.NewReader(fc.Content))); err != nil || n != bigFile {
		t.Errorf("JSON content: %d bytes, %v", n, err)
	}
	fc.Content = ""
	if grew := vmHWM(t, pid) - base; grew > mostGrowth {
		t.Errorf("the JSON download of %d bytes grew the server's peak RSS by %d MB", bigFile, grew>>20)
	} else {
		t.Logf("JSON: peak RSS %d MB -> %d MB", base>>20, (base+grew)>>20)
	}

	for _, how := range []struct{ path, accept string }{{"/files/raw?path=z", ""}, {"/files/content?path=z", "application/octet-stream"}} {
		base = resetHWM(t, pid)
		req, _ := http.NewRequest("GET", s.url+"/sessions/"+id+how.path, nil)
		if how.accept != "" {
			req.Header.Set("Accept", how.accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, err := countZeros(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || n != bigFile || resp.ContentLength != bigFile || resp.Header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("raw %s: %d, %d bytes (Content-Length %d, %s), %v", how.path, resp.StatusCode, n, resp.ContentLength, resp.Header.Get("Content-Type"), err)
		}
		if grew := vmHWM(t, pid) - base; grew > mostGrowth {
			t.Errorf("the raw download (%s) grew the server's peak RSS by %d MB", how.path, grew>>20)
		} else {
			t.Logf("raw %s: peak RSS %d MB -> %d MB", how.path, base>>20, (base+grew)>>20)
		}
	}

	base = resetHWM(t, pid)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", e2bURL+"/files?path=/home/user/z", nil)
			req.Header = h.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if n, err := countZeros(resp.Body); resp.StatusCode != 200 || err != nil || n != bigFile {
				errs <- fmt.Errorf("E2B download: %d, %d bytes, %v", resp.StatusCode, n, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if grew := vmHWM(t, pid) - base; grew > mostGrowth {
		t.Errorf("10 concurrent E2B downloads of %d bytes grew the server's peak RSS by %d MB", bigFile, grew>>20)
	} else {
		t.Logf("E2B x10: peak RSS %d MB -> %d MB", base>>20, (base+grew)>>20)
	}
}

// TestTransferCapRefusesTheNextAtOnce: with SANDBOX_MAX_TRANSFERS=2, two
// downloads whose clients stop reading hold both slots; the third is
// refused at once, as busy with the setting named (REST 503 with
// Retry-After, E2B 429), and once the stalled clients go, the slots are
// free again.
func TestTransferCapRefusesTheNextAtOnce(t *testing.T) {
	s, e2bURL := e2bServer(t, "SANDBOX_MAX_TRANSFERS=2")
	id := sessionWithBigFile(t, s)
	h := e2bSandbox(t, e2bURL)
	var stalled []net.Conn
	for range 2 {
		// A client that sends the request and never reads: the server
		// fills the socket's buffers and waits, holding its slot.
		c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, c)
		fmt.Fprintf(c, "GET /sessions/%s/files/content?path=z HTTP/1.1\r\nHost: x\r\nAccept: application/octet-stream\r\n\r\n", id)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, " 200 ") {
			t.Fatalf("stalled download: %q %v", line, err)
		}
	}
	start := time.Now()
	code, p := call(t, "GET", s.url+"/sessions/"+id+"/files/content?path=z", "", nil)
	detail, _ := p["detail"].(string)
	if code != 503 || p["kind"] != "busy" || !strings.Contains(detail, "SANDBOX_MAX_TRANSFERS") || time.Since(start) > 5*time.Second {
		t.Fatalf("the third download over REST: %d %v after %v", code, p, time.Since(start))
	}
	req, _ := http.NewRequest("GET", e2bURL+"/files?path=/home/user/z", nil)
	req.Header = h.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || !strings.Contains(string(body), "SANDBOX_MAX_TRANSFERS") {
		t.Fatalf("the third download over E2B: %d %s", resp.StatusCode, body)
	}
	for _, c := range stalled {
		c.Close()
	}
	// The server sees the connections gone at its next write.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(s.url + "/sessions/" + id + "/files/raw?path=z")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := countZeros(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && n == bigFile {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slots were not freed after the stalled clients left: %d", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
