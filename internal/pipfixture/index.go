package pipfixture

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/policy"
)

// Index is a PEP 503 simple index over the wheels and sdists in a
// directory, served on 127.0.0.1. The directory is read on every request,
// so files written after [ServeIndex] are offered too.
type Index struct {
	// URL is the index URL to give pip, such as
	// http://127.0.0.1:PORT/simple.
	URL string

	dir string
	srv *http.Server

	mu       sync.Mutex
	requests map[string]int
	hashes   map[string]fileHash
}

// fileHash caches a file's digest while its size and time are unchanged:
// padded wheels are large and pip reads the project page more than once.
type fileHash struct {
	size int64
	mod  time.Time
	hex  string
}

// ServeIndex serves dir as a simple index on a random loopback port:
// /simple/ lists every project, /simple/{normalized}/ links each file of
// that project as ../../files/{fn}#sha256={hex}, and /files/{fn} is the
// file. Unknown projects and files are 404. Close stops it.
func ServeIndex(dir string) (*Index, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("pipfixture: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("pipfixture: %s is not a directory", dir)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pipfixture: %w", err)
	}
	i := &Index{
		URL:      "http://" + ln.Addr().String() + "/simple",
		dir:      dir,
		requests: map[string]int{},
		hashes:   map[string]fileHash{},
	}
	i.srv = &http.Server{Handler: http.HandlerFunc(i.serve), ReadHeaderTimeout: 10 * time.Second}
	go i.srv.Serve(ln)
	return i, nil
}

// Close stops the server and drops its connections.
func (i *Index) Close() error { return i.srv.Close() }

// Requests is how many requests asked for path (such as "/simple/demo/"
// or "/files/demo-1.0-py3-none-any.whl"), whatever the answer was.
func (i *Index) Requests(path string) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.requests[path]
}

func (i *Index) serve(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	i.requests[r.URL.Path]++
	i.mu.Unlock()

	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/simple":
		http.Redirect(w, r, "/simple/", http.StatusMovedPermanently)
	case p == "/simple/":
		i.serveRoot(w)
	case strings.HasPrefix(p, "/simple/"):
		i.serveProject(w, r, strings.TrimPrefix(p, "/simple/"))
	case strings.HasPrefix(p, "/files/"):
		i.serveFile(w, r, strings.TrimPrefix(p, "/files/"))
	default:
		http.NotFound(w, r)
	}
}

// projects maps each normalized project name to its files in dir, sorted.
func (i *Index) projects() (map[string][]string, error) {
	entries, err := os.ReadDir(i.dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if name := projectOf(e.Name()); name != "" {
			out[name] = append(out[name], e.Name())
		}
	}
	for _, files := range out {
		slices.Sort(files)
	}
	return out, nil
}

// projectOf is the normalized project a distribution file belongs to, or
// "" for anything else.
func projectOf(fn string) string {
	if name, _, ok := policy.ParseWheelFilename(fn); ok {
		return name
	}
	if !policy.IsSdistFilename(fn) {
		return ""
	}
	stem := fn
	for _, ext := range []string{".tar.gz", ".tar.bz2", ".zip"} {
		if strings.HasSuffix(strings.ToLower(stem), ext) {
			stem = stem[:len(stem)-len(ext)]
			break
		}
	}
	// The version has no "-" in a well-formed sdist name; the name may.
	cut := strings.LastIndexByte(stem, '-')
	if cut <= 0 {
		return ""
	}
	return policy.NormalizePackageName(stem[:cut])
}

const pageHead = `<!DOCTYPE html>
<html>
<head><meta name="pypi:repository-version" content="1.0"><title>%s</title></head>
<body>
<h1>%s</h1>
`

func (i *Index) serveRoot(w http.ResponseWriter) {
	projects, err := i.projects()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	names := make([]string, 0, len(projects))
	for n := range projects {
		names = append(names, n)
	}
	slices.Sort(names)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, pageHead, "Simple index", "Simple index")
	for _, n := range names {
		fmt.Fprintf(w, "<a href=\"%s/\">%s</a><br>\n", url.PathEscape(n), html.EscapeString(n))
	}
	io.WriteString(w, "</body>\n</html>\n")
}

func (i *Index) serveProject(w http.ResponseWriter, r *http.Request, rest string) {
	name, slash := strings.CutSuffix(rest, "/")
	if name == "" || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	projects, err := i.projects()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	norm := policy.NormalizePackageName(name)
	files := projects[norm]
	if len(files) == 0 {
		http.NotFound(w, r)
		return
	}
	// PEP 503: the canonical URL is the normalized name with a slash.
	if norm != name || !slash {
		http.Redirect(w, r, "/simple/"+url.PathEscape(norm)+"/", http.StatusMovedPermanently)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	title := "Links for " + html.EscapeString(norm)
	fmt.Fprintf(w, pageHead, title, title)
	for _, fn := range files {
		sum, err := i.hash(fn)
		if err != nil {
			continue // removed since the listing
		}
		fmt.Fprintf(w, "<a href=\"../../files/%s#sha256=%s\">%s</a><br>\n", url.PathEscape(fn), sum, html.EscapeString(fn))
	}
	io.WriteString(w, "</body>\n</html>\n")
}

func (i *Index) hash(fn string) (string, error) {
	f, err := os.Open(filepath.Join(i.dir, fn))
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	i.mu.Lock()
	c, ok := i.hashes[fn]
	i.mu.Unlock()
	if ok && c.size == st.Size() && c.mod.Equal(st.ModTime()) {
		return c.hex, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	c = fileHash{size: st.Size(), mod: st.ModTime(), hex: hex.EncodeToString(h.Sum(nil))}
	i.mu.Lock()
	i.hashes[fn] = c
	i.mu.Unlock()
	return c.hex, nil
}

func (i *Index) serveFile(w http.ResponseWriter, r *http.Request, fn string) {
	// Only distribution files directly in dir: no paths, no dot files
	// (the temporary files of writeAtomically), nothing else.
	if fn == "" || strings.ContainsAny(fn, `/\`) || strings.HasPrefix(fn, ".") || projectOf(fn) == "" {
		http.NotFound(w, r)
		return
	}
	f, err := os.Open(filepath.Join(i.dir, fn))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, fn, st.ModTime(), f)
}
