package envbuild

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// baseOf resolves "base" to the shared Debian root.
func baseOf(root string) func(string) (string, bool) {
	return func(from string) (string, bool) { return root, from == "base" }
}

// A Dockerfile on an environment's root gives an OCI archive with the
// RUN's file, the COPY, the ENV and the WORKDIR.
func TestDockerfileOnDebianRoot(t *testing.T) {
	requireTools(t, "buildah")
	root := sharedRoot(t)
	ctxDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "file"), []byte("from the context\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "image.tar")
	var log strings.Builder
	start := time.Now()
	err := Dockerfile(context.Background(), DockerfileOptions{
		Dockerfile: "FROM base\nRUN echo hi > /etc/x\nCOPY file /opt/f\nENV A=1\nWORKDIR /w\n",
		ContextDir: ctxDir,
		Bases:      baseOf(root),
	}, dst, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, tailOf(log.String()))
	}
	t.Logf("the Dockerfile build took %v", time.Since(start).Round(time.Millisecond))
	img := readOCIArchive(t, dst)
	if !slices.Contains(img.config.Config.Env, "A=1") || img.config.Config.WorkingDir != "/w" {
		t.Fatalf("config: env %v, workdir %q", img.config.Config.Env, img.config.Config.WorkingDir)
	}
	if got := img.files["etc/x"]; got != "hi\n" {
		t.Fatalf("/etc/x: %q", got)
	}
	if got := img.files["opt/f"]; got != "from the context\n" {
		t.Fatalf("/opt/f: %q", got)
	}
	if _, ok := img.files["usr/bin/python3"]; !ok {
		t.Fatalf("the base's /usr/bin/python3 is not in the image")
	}
}

// A RUN step that tries to reach the network fails the build: the host's
// listeners hear nothing, and nothing is left.
func TestDockerfileRunHasNoNetwork(t *testing.T) {
	requireTools(t, "buildah")
	root := sharedRoot(t)
	heard := listenEverywhere(t)
	var run strings.Builder
	run.WriteString("import socket\n")
	for _, a := range heard.addrs {
		h, p, _ := strings.Cut(a, ":")
		fmt.Fprintf(&run, "socket.create_connection((%q, %s), timeout=3).close()\n", h, p)
	}
	dst := filepath.Join(t.TempDir(), "image.tar")
	var log strings.Builder
	err := Dockerfile(context.Background(), DockerfileOptions{
		Dockerfile: "FROM base\nRUN /usr/bin/python3 -c '" + strings.ReplaceAll(run.String(), "\n", "; ") + "'\n",
		Bases:      baseOf(root),
	}, dst, &log)
	if !errors.Is(err, ErrBuild) {
		t.Fatalf("want the build to fail, got %v\n%s", err, tailOf(log.String()))
	}
	if n := heard.count.Load(); n != 0 {
		t.Fatalf("the host's listeners %v got %d connections from a RUN step", heard.addrs, n)
	}
	if !strings.Contains(log.String(), "[Errno") {
		t.Fatalf("the RUN step did not fail on its connect:\n%s", tailOf(log.String()))
	}
	if _, serr := os.Lstat(dst); !os.IsNotExist(serr) {
		t.Fatalf("the failed build left %s", dst)
	}
	t.Logf("error: %v", err)
}

// Names the build cannot resolve are refused before buildah runs.
func TestDockerfileBadRecipes(t *testing.T) {
	dir := t.TempDir()
	bases := func(from string) (string, bool) { return dir, from == "mine" }
	cases := []struct{ name, dockerfile, want string }{
		{"registry", "FROM docker.io/library/alpine:3\nRUN true\n", "no such environment"},
		{"second stage unknown", "FROM mine AS a\nFROM python:3.12\n", "no such environment"},
		{"arg in from", "ARG B=mine\nFROM $B\n", "build arguments"},
		{"no from", "RUN true\n", "no FROM"},
		{"empty", " \n", "empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Dockerfile(context.Background(), DockerfileOptions{Dockerfile: c.dockerfile, Bases: bases}, filepath.Join(dir, "out.tar"), nil)
			if !errors.Is(err, ErrBadRecipe) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want ErrBadRecipe with %q, got %v", c.want, err)
			}
		})
	}
}

func TestDockerfileBases(t *testing.T) {
	got, err := dockerfileBases("# c\nfrom --platform=linux/amd64 one AS build\nRUN x \\\n  FROM no\nFROM build\nFROM scratch\nCOPY --from=build / /\nFROM two\nFROM one\n")
	if err != nil || !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("got %v, %v", got, err)
	}
}

// ociImage is what the tests read of an OCI archive: the config and the
// files of its layers, applied in order (contents of regular files).
type ociImage struct {
	config struct {
		Config struct {
			Env        []string `json:"Env"`
			WorkingDir string   `json:"WorkingDir"`
		} `json:"config"`
	}
	files map[string]string
}

type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
}

func readOCIArchive(t *testing.T, path string) ociImage {
	t.Helper()
	blobs := map[string][]byte{}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			blobs[strings.TrimPrefix(h.Name, "./")] = b
		}
	}
	blob := func(d ociDescriptor) []byte {
		b, ok := blobs["blobs/"+strings.Replace(d.Digest, ":", "/", 1)]
		if !ok {
			t.Fatalf("no blob %s in the archive", d.Digest)
		}
		return b
	}
	var index struct{ Manifests []ociDescriptor }
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, blobs["index.json"])
	}
	var manifest struct {
		Config ociDescriptor
		Layers []ociDescriptor
	}
	if err := json.Unmarshal(blob(index.Manifests[0]), &manifest); err != nil {
		t.Fatal(err)
	}
	var img ociImage
	if err := json.Unmarshal(blob(manifest.Config), &img.config); err != nil {
		t.Fatal(err)
	}
	img.files = map[string]string{}
	for _, l := range manifest.Layers {
		var r io.Reader = strings.NewReader(string(blob(l)))
		if strings.HasSuffix(l.MediaType, "+gzip") {
			gz, err := gzip.NewReader(r)
			if err != nil {
				t.Fatal(err)
			}
			r = gz
		}
		lr := tar.NewReader(r)
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", l.Digest, err)
			}
			name := strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")
			switch h.Typeflag {
			case tar.TypeReg:
				b, _ := io.ReadAll(io.LimitReader(lr, 1<<10))
				img.files[name] = string(b)
			case tar.TypeSymlink:
				img.files[name] = "-> " + h.Linkname
			}
		}
	}
	return img
}

// With Allow, RUN steps reach the allowed host through the build's proxy
// (http_proxy), and nothing else: another host listener hears nothing,
// directly or through the proxy.
func TestDockerfileRunReachesOnlyAllowed(t *testing.T) {
	requireTools(t, "buildah")
	root := sharedRoot(t)
	allowed, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "index says hello")
	})}
	go srv.Serve(allowed)
	t.Cleanup(func() { srv.Close() })
	other := listenEverywhere(t)
	// python3-minimal has sockets but not urllib: speak HTTP to the proxy by hand.
	script := `import os, socket, sys
proxy = os.environ["http_proxy"].rsplit("/", 1)[-1].rsplit(":", 1)
def get(target):
    s = socket.create_connection((proxy[0], int(proxy[1])), timeout=10)
    s.sendall(("GET http://%s/ HTTP/1.0\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            return data.decode(errors="replace")
        data += b
out = open("/etc/got", "w")
out.write(get(sys.argv[1]).split("\r\n\r\n", 1)[-1] + "\n")
for a in sys.argv[2:]:
    out.write("proxy %s: %s\n" % (a, get(a).split("\r\n", 1)[0]))
    h, p = a.rsplit(":", 1)
    try:
        socket.create_connection((h, int(p)), timeout=3).close()
        out.write("direct %s: CONNECTED\n" % a)
    except OSError as e:
        out.write("direct %s: %s\n" % (a, e))
`
	ctxDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "probe.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "image.tar")
	var log strings.Builder
	err = Dockerfile(context.Background(), DockerfileOptions{
		Dockerfile: fmt.Sprintf("FROM base\nCOPY probe.py /probe.py\nRUN /usr/bin/python3 /probe.py %s %s\n", allowed.Addr(), strings.Join(other.addrs, " ")),
		ContextDir: ctxDir,
		Bases:      baseOf(root),
		Allow:      allowed.Addr().String(),
	}, dst, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, tailOf(log.String()))
	}
	got := readOCIArchive(t, dst).files["etc/got"]
	if !strings.HasPrefix(got, "index says hello\n") {
		t.Fatalf("the RUN step did not reach the allowed host through the proxy:\n%s", got)
	}
	if n := other.count.Load(); n != 0 || strings.Contains(got, "CONNECTED") {
		t.Fatalf("the other listeners %v got %d connections:\n%s", other.addrs, n, got)
	}
	if strings.Count(got, " 403 ") != len(other.addrs) {
		t.Fatalf("the proxy did not refuse the other addresses:\n%s", got)
	}
	t.Logf("inside the RUN step:\n%s", got)
}
