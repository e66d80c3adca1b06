// Package docs serves a self-contained API documentation page for the
// service's OpenAPI document. The page, its script and its stylesheet are
// embedded in the binary and load nothing from anywhere else, so the
// documentation works offline and under a strict Content-Security-Policy.
package docs

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
)

//go:embed assets/index.html assets/docs.js assets/docs.css
var files embed.FS

// CSP is the Content-Security-Policy sent with every response of Handler.
// The page runs only its own script and stylesheet, talks only to its own
// origin (the spec and "Try it" requests) and cannot be framed.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset is one response body with its validators.
type asset struct {
	contentType string
	body        []byte
	etag        string // strong, quoted ETag: a hash of body
	version     string // short hash the page appends as ?v= to bust caches
}

func newAsset(contentType string, body []byte) *asset {
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	return &asset{contentType: contentType, body: body, etag: `"` + h[:32] + `"`, version: h[:16]}
}

func mustRead(name string) []byte {
	b, err := files.ReadFile("assets/" + name)
	if err != nil {
		panic("docs: embedded asset missing: " + name)
	}
	return b
}

var (
	page = template.Must(template.New("index.html").Parse(string(mustRead("index.html"))))

	// static are the files served next to the page, by name.
	static = map[string]*asset{
		"docs.js":  newAsset("text/javascript; charset=utf-8", mustRead("docs.js")),
		"docs.css": newAsset("text/css; charset=utf-8", mustRead("docs.css")),
	}
)

// pageData fills index.html. html/template escapes each field for the
// context it appears in, so any spec URL is safe in the data-spec attribute.
type pageData struct {
	Spec   string // URL of the OpenAPI document, read by docs.js
	Script string // relative URL of docs.js
	Style  string // relative URL of docs.css
}

// Handler returns the documentation handler. Mount it on both a path and
// its subtree, e.g.
//
//	mux.Handle("GET /docs", docs.Handler("/openapi.json"))
//	mux.Handle("GET /docs/", docs.Handler("/openapi.json"))
//
// "/docs" and "/docs/" serve the page, "/docs/docs.js" and "/docs/docs.css"
// its assets, and any other path under "/docs/" is 404. specURL is the
// address the page fetches the OpenAPI document from; under the CSP it must
// be on the same origin (a path such as "/openapi.json" is simplest).
func Handler(specURL string) http.Handler {
	return &handler{specURL: specURL}
}

type handler struct {
	specURL string
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", CSP)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name, ok := route(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	var a *asset
	if name == "" {
		var err error
		if a, err = h.render(r); err != nil {
			http.Error(w, "rendering the documentation page failed", http.StatusInternalServerError)
			return
		}
		// The page names the current asset versions, so it must be revalidated.
		hdr.Set("Cache-Control", "no-cache")
	} else {
		a = static[name]
		if r.URL.Query().Get("v") == a.version {
			// The URL carries the content hash: it can never change.
			hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			hdr.Set("Cache-Control", "no-cache")
		}
	}
	hdr.Set("Content-Type", a.contentType)
	hdr.Set("ETag", a.etag)
	// ServeContent answers If-None-Match with 304 and handles HEAD.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// render executes index.html for this request. Asset URLs are relative to
// the URL the browser asked for, so the page works at "/docs", at "/docs/"
// and behind a proxy that adds a path prefix.
func (h *handler) render(r *http.Request) (*asset, error) {
	p := r.URL.EscapedPath()
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
		p = u.EscapedPath() // what the browser sees, even under http.StripPrefix
	}
	base := "./"
	if seg := p[strings.LastIndex(p, "/")+1:]; seg != "" {
		base = "./" + seg + "/" // "/docs" -> "./docs/docs.js"
	}
	var buf bytes.Buffer
	err := page.Execute(&buf, pageData{
		Spec:   h.specURL,
		Script: base + "docs.js?v=" + static["docs.js"].version,
		Style:  base + "docs.css?v=" + static["docs.css"].version,
	})
	if err != nil {
		return nil, err
	}
	return newAsset("text/html; charset=utf-8", buf.Bytes()), nil
}

// route names what a request asks for: "" for the page, or a key of static.
// The mount point comes from the ServeMux pattern that matched, so that
// unknown paths under it are 404. Without a usable pattern (a direct call,
// http.StripPrefix, a pattern with wildcards) it falls back to the last path
// element: an asset name serves that asset, anything else the page.
func route(r *http.Request) (string, bool) {
	p := r.URL.Path
	root, ok := mountPoint(r.Pattern)
	if !ok || (p != root && !strings.HasPrefix(p, root+"/")) {
		if seg := p[strings.LastIndex(p, "/")+1:]; static[seg] != nil {
			return seg, true
		}
		return "", true
	}
	rest := strings.TrimPrefix(p[len(root):], "/")
	if rest == "" {
		return "", true
	}
	if static[rest] != nil {
		return rest, true
	}
	return "", false
}

// mountPoint extracts the path of a ServeMux pattern such as "GET /docs/"
// or "example.com/docs", without its trailing slash.
func mountPoint(pattern string) (string, bool) {
	if pattern == "" {
		return "", false
	}
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		pattern = strings.TrimLeft(pattern[i+1:], " \t")
	}
	i := strings.IndexByte(pattern, '/')
	if i < 0 {
		return "", false
	}
	p := pattern[i:]
	if strings.ContainsAny(p, "{}") {
		return "", false
	}
	return strings.TrimSuffix(p, "/"), true
}
