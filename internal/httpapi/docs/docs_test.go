package docs

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// hostileSpecURL would break out of the attribute if it were not escaped.
const hostileSpecURL = `/openapi.json?x="><script>alert(1)</script><b a='`

// newServer mounts the handler the way the API server does.
func newServer(t *testing.T, specURL string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	h := Handler(specURL)
	mux.Handle("GET /docs", h)
	mux.Handle("GET /docs/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, rawURL string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

// pageRefs parses the page and returns the data-spec value and the URLs of
// its script and stylesheet.
func pageRefs(t *testing.T, body string) (spec string, found bool, refs []string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			attr := map[string]string{}
			for _, a := range n.Attr {
				attr[a.Key] = a.Val
			}
			if v, ok := attr["data-spec"]; ok {
				spec, found = v, true
			}
			switch {
			case n.Data == "script":
				refs = append(refs, attr["src"])
			case n.Data == "link" && attr["rel"] == "stylesheet":
				refs = append(refs, attr["href"])
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return spec, found, refs
}

func checkCommonHeaders(t *testing.T, what string, res *http.Response) {
	t.Helper()
	if got := res.Header.Get("Content-Security-Policy"); got != CSP {
		t.Errorf("%s: Content-Security-Policy = %q, want %q", what, got, CSP)
	}
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"} {
		if !strings.Contains(res.Header.Get("Content-Security-Policy"), d) {
			t.Errorf("%s: CSP lacks %q", what, d)
		}
	}
	if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options = %q", what, got)
	}
}

func TestPageEscapesSpecURL(t *testing.T) {
	srv := newServer(t, hostileSpecURL)
	res, body := get(t, srv.URL+"/docs", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /docs: status %d", res.StatusCode)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	checkCommonHeaders(t, "/docs", res)
	if strings.Contains(body, "<script>alert") || strings.Contains(body, `x="`) {
		t.Fatalf("spec URL inserted unescaped:\n%s", body)
	}
	if !strings.Contains(body, `data-spec="/openapi.json?x=&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;b a=&#39;"`) {
		t.Errorf("data-spec attribute not HTML-escaped as expected:\n%s", body)
	}
	// A browser reads back exactly the configured URL.
	spec, found, _ := pageRefs(t, body)
	if !found || spec != hostileSpecURL {
		t.Errorf("data-spec parses as %q (found %v), want %q", spec, found, hostileSpecURL)
	}
}

// TestPageAssetsResolve loads the page at both mount paths and follows its
// script and stylesheet references the way a browser would.
func TestPageAssetsResolve(t *testing.T) {
	srv := newServer(t, "/openapi.json")
	for _, p := range []string{"/docs", "/docs/"} {
		res, body := get(t, srv.URL+p, nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: status %d", p, res.StatusCode)
		}
		if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s: Cache-Control = %q, want no-cache", p, cc)
		}
		spec, _, refs := pageRefs(t, body)
		if spec != "/openapi.json" {
			t.Errorf("GET %s: data-spec = %q", p, spec)
		}
		if len(refs) != 2 {
			t.Fatalf("GET %s: want one script and one stylesheet, got %q", p, refs)
		}
		base, _ := url.Parse(srv.URL + p)
		for _, ref := range refs {
			u, err := base.Parse(ref)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(u.Path, "/docs/docs.") {
				t.Errorf("GET %s: %q resolves to %s, want under /docs/", p, ref, u.Path)
			}
			ares, _ := get(t, u.String(), nil)
			if ares.StatusCode != http.StatusOK {
				t.Errorf("GET %s: status %d", u, ares.StatusCode)
			}
			// The versioned URL is the content hash, so it may be cached forever.
			if cc := ares.Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") {
				t.Errorf("GET %s: Cache-Control = %q, want immutable", u, cc)
			}
		}
	}
}

func TestAssets(t *testing.T) {
	srv := newServer(t, "/openapi.json")
	for _, tc := range []struct{ path, ctype string }{
		{"/docs/docs.js", "text/javascript; charset=utf-8"},
		{"/docs/docs.css", "text/css; charset=utf-8"},
		{"/docs", "text/html; charset=utf-8"},
	} {
		res, body := get(t, srv.URL+tc.path, nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: status %d", tc.path, res.StatusCode)
		}
		if got := res.Header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("GET %s: Content-Type = %q, want %q", tc.path, got, tc.ctype)
		}
		if len(body) == 0 {
			t.Errorf("GET %s: empty body", tc.path)
		}
		if res.Header.Get("Cache-Control") == "" {
			t.Errorf("GET %s: no Cache-Control", tc.path)
		}
		checkCommonHeaders(t, tc.path, res)
		etag := res.Header.Get("ETag")
		if !regexp.MustCompile(`^"[0-9a-f]{32}"$`).MatchString(etag) {
			t.Fatalf("GET %s: ETag = %q, want a quoted hash", tc.path, etag)
		}
		res2, body2 := get(t, srv.URL+tc.path, map[string]string{"If-None-Match": etag})
		if res2.StatusCode != http.StatusNotModified || body2 != "" {
			t.Errorf("GET %s with If-None-Match: status %d, %d body bytes; want 304 and none", tc.path, res2.StatusCode, len(body2))
		}
		res3, _ := get(t, srv.URL+tc.path, map[string]string{"If-None-Match": `"stale"`})
		if res3.StatusCode != http.StatusOK {
			t.Errorf("GET %s with a stale If-None-Match: status %d, want 200", tc.path, res3.StatusCode)
		}
	}
}

func TestUnknownPaths(t *testing.T) {
	srv := newServer(t, "/openapi.json")
	for _, p := range []string{"/docs/nope.js", "/docs/index.html", "/docs/assets/docs.js", "/docs/x/docs.js", "/docs/docs.js/"} {
		res, _ := get(t, srv.URL+p, nil)
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", p, res.StatusCode)
		}
		checkCommonHeaders(t, p, res)
	}
}

// TestUnmounted covers uses without a ServeMux pattern to go by: a direct
// call and http.StripPrefix.
func TestUnmounted(t *testing.T) {
	h := Handler("/openapi.json")
	strip := http.StripPrefix("/docs", h)
	for _, tc := range []struct {
		h           http.Handler
		path, ctype string
	}{
		{h, "/", "text/html; charset=utf-8"},
		{h, "/docs.js", "text/javascript; charset=utf-8"},
		{strip, "/docs/", "text/html; charset=utf-8"},
		{strip, "/docs/docs.css", "text/css; charset=utf-8"},
	} {
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != tc.ctype {
			t.Errorf("GET %s: status %d, Content-Type %q; want 200, %q", tc.path, rec.Code, rec.Header().Get("Content-Type"), tc.ctype)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d, want 405", rec.Code)
	}
}

func readAssets(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 {
		t.Fatalf("embedded %d files, want 3: %v", len(out), out)
	}
	return out
}

// TestNoExternalReferences keeps the page offline: nothing embedded may name
// another host, not even in a comment.
func TestNoExternalReferences(t *testing.T) {
	external := regexp.MustCompile(`(?i)https?:|//cdn|@import|(src|href|action)\s*=\s*["']?//|url\(\s*["']?(//|[a-z]+:)`)
	for name, text := range readAssets(t) {
		for i, line := range strings.Split(text, "\n") {
			if m := external.FindString(line); m != "" {
				t.Errorf("%s:%d refers to an external resource (%q): %s", name, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// TestIndexHasNoInlineCode: the CSP blocks inline scripts, inline styles and
// event-handler attributes, so the page must not depend on any.
func TestIndexHasNoInlineCode(t *testing.T) {
	page := readAssets(t)["assets/index.html"]
	if regexp.MustCompile(`(?i)style\s*=`).MatchString(page) || strings.Contains(strings.ToLower(page), "<style") {
		t.Error("index.html has inline style")
	}
	if m := regexp.MustCompile(`(?i)\son[a-z]+\s*=`).FindString(page); m != "" {
		t.Errorf("index.html has an event-handler attribute %q", m)
	}
	scripts := regexp.MustCompile(`(?is)<script([^>]*)>(.*?)</script>`).FindAllStringSubmatch(page, -1)
	if len(scripts) == 0 {
		t.Fatal("index.html loads no script")
	}
	for _, s := range scripts {
		if strings.TrimSpace(s[2]) != "" || !strings.Contains(s[1], "src=") {
			t.Errorf("inline script in index.html: %q", s[0])
		}
	}
}

// TestScriptUsesNoHTMLSinks: docs.js must build the DOM from text, never by
// parsing strings as HTML or code, and must not set inline styles.
func TestScriptUsesNoHTMLSinks(t *testing.T) {
	js := readAssets(t)["assets/docs.js"]
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", ".style.", `"style"`, "setTimeout(\"", "DOMParser", "createContextualFragment"} {
		if strings.Contains(js, sink) {
			t.Errorf("docs.js uses %s", sink)
		}
	}
}

// TestScriptSyntax parses docs.js with node. A missing node is a failure, not
// a skip: the check must run wherever the tests run.
func TestScriptSyntax(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH; it is needed to syntax-check assets/docs.js (install Node.js 20 or later): %v", err)
	}
	out, err := exec.Command(node, "--check", "assets/docs.js").CombinedOutput()
	if err != nil {
		t.Fatalf("node --check assets/docs.js: %v\n%s", err, out)
	}
}
