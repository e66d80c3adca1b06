package pipfixture

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/policy"
)

// readZip returns every entry of a zip by name.
func readZip(t *testing.T, path string) (map[string][]byte, map[string]*zip.File) {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	bodies, headers := map[string][]byte{}, map[string]*zip.File{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		bodies[f.Name], headers[f.Name] = b, f
	}
	return bodies, headers
}

// checkRecord verifies RECORD against the wheel's entries, as pip does.
func checkRecord(t *testing.T, bodies map[string][]byte, recordPath string) {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(bodies[recordPath])).ReadAll()
	if err != nil {
		t.Fatalf("RECORD: %v", err)
	}
	listed := map[string]bool{}
	for _, row := range rows {
		if len(row) != 3 {
			t.Fatalf("RECORD row %q", row)
		}
		listed[row[0]] = true
		body, ok := bodies[row[0]]
		if !ok {
			t.Errorf("RECORD lists %s, which is not in the wheel", row[0])
			continue
		}
		if row[0] == recordPath {
			if row[1] != "" || row[2] != "" {
				t.Errorf("RECORD's own row is %q, want no hash and size", row)
			}
			continue
		}
		sum := sha256.Sum256(body)
		if want := "sha256=" + base64.RawURLEncoding.EncodeToString(sum[:]); row[1] != want {
			t.Errorf("RECORD %s: hash %s, want %s", row[0], row[1], want)
		}
		if want := strconv.Itoa(len(body)); row[2] != want {
			t.Errorf("RECORD %s: size %s, want %s", row[0], row[2], want)
		}
	}
	for name := range bodies {
		if !listed[name] {
			t.Errorf("%s is not in RECORD", name)
		}
	}
}

func TestWheelLayout(t *testing.T) {
	dir := t.TempDir()
	path, err := Wheel(dir, "Demo-Pkg.x", "1.2.3", WheelOptions{
		Requires:    []string{"other>=1.0", "third[extra]; python_version >= '3'"},
		ExtraSource: "def answer():\n    return 42",
		Files:       map[string]string{"demo_extra.pth": "import sys\n"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "demo_pkg_x-1.2.3-py3-none-any.whl"); path != want {
		t.Fatalf("path %s, want %s", path, want)
	}
	if name, version, ok := policy.ParseWheelFilename(filepath.Base(path)); !ok || name != "demo-pkg-x" || version != "1.2.3" {
		t.Errorf("ParseWheelFilename: %q %q %v", name, version, ok)
	}
	bodies, _ := readZip(t, path)
	const di = "demo_pkg_x-1.2.3.dist-info/"
	names := slices.Sorted(maps.Keys(bodies))
	want := []string{"Demo_Pkg_x/__init__.py", di + "METADATA", di + "RECORD", di + "WHEEL", di + "top_level.txt", "demo_extra.pth"}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	init := string(bodies["Demo_Pkg_x/__init__.py"])
	for _, s := range []string{`__version__ = "1.2.3"`, `VALUE = "Demo-Pkg.x 1.2.3"`, "def answer():\n    return 42\n"} {
		if !strings.Contains(init, s) {
			t.Errorf("__init__.py lacks %q:\n%s", s, init)
		}
	}
	meta := string(bodies[di+"METADATA"])
	for _, s := range []string{"Metadata-Version: 2.1\n", "Name: Demo-Pkg.x\n", "Version: 1.2.3\n",
		"Requires-Dist: other>=1.0\n", "Requires-Dist: third[extra]; python_version >= '3'\n"} {
		if !strings.Contains(meta, s) {
			t.Errorf("METADATA lacks %q:\n%s", s, meta)
		}
	}
	wheel := string(bodies[di+"WHEEL"])
	for _, s := range []string{"Wheel-Version: 1.0\n", "Generator: ", "Root-Is-Purelib: true\n", "Tag: py3-none-any\n"} {
		if !strings.Contains(wheel, s) {
			t.Errorf("WHEEL lacks %q:\n%s", s, wheel)
		}
	}
	if got := string(bodies[di+"top_level.txt"]); got != "Demo_Pkg_x\n" {
		t.Errorf("top_level.txt %q", got)
	}
	checkRecord(t, bodies, di+"RECORD")

	// The same inputs make the same bytes.
	first, _ := os.ReadFile(path)
	if _, err := Wheel(dir, "Demo-Pkg.x", "1.2.3", WheelOptions{
		Requires:    []string{"other>=1.0", "third[extra]; python_version >= '3'"},
		ExtraSource: "def answer():\n    return 42",
		Files:       map[string]string{"demo_extra.pth": "import sys\n"},
	}); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(path); !bytes.Equal(first, second) {
		t.Error("Wheel is not reproducible")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".pipfixture-*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %q", left)
	}
}

func TestWheelRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, version string
		opts          WheelOptions
	}{
		{"../evil", "1.0", WheelOptions{}},
		{"a/b", "1.0", WheelOptions{}},
		{"demo[x]", "1.0", WheelOptions{}},
		{"demo", "1.0/../../x", WheelOptions{}},
		{"demo", "latest", WheelOptions{}},
		{"demo", "", WheelOptions{}},
		{"demo", ">=1.0", WheelOptions{}},
		{"demo", "1.*", WheelOptions{}},
		{" demo", "1.0", WheelOptions{}},
		{"demo", "1.0", WheelOptions{Modules: []string{"not-an-identifier"}}},
		{"demo", "1.0", WheelOptions{Modules: []string{"../x"}}},
		{"demo", "1.0", WheelOptions{Files: map[string]string{"../escape.py": ""}}},
		{"demo", "1.0", WheelOptions{Files: map[string]string{"/abs.py": ""}}},
		{"demo", "1.0", WheelOptions{Files: map[string]string{"a/./b.py": ""}}},
	}
	for _, c := range cases {
		if p, err := Wheel(dir, c.name, c.version, c.opts); err == nil {
			t.Errorf("Wheel(%q, %q, %+v) = %s, want an error", c.name, c.version, c.opts, p)
		}
	}
	if _, err := Sdist(dir, "../evil", "1.0"); err == nil {
		t.Error("Sdist accepted a path for a name")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused fixtures left files: %v", entries)
	}
	if _, err := Wheel(filepath.Join(dir, "missing"), "demo", "1.0", WheelOptions{}); err == nil {
		t.Error("Wheel into a missing directory succeeded")
	}
}

func TestWheelPadBytes(t *testing.T) {
	dir := t.TempDir()
	const pad = 3 << 20
	path, err := Wheel(dir, "padded", "0.1", WheelOptions{PadBytes: pad})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < pad {
		t.Errorf("wheel is %d bytes, want at least %d", st.Size(), pad)
	}
	bodies, headers := readZip(t, path)
	f := headers["padded/"+PadFile]
	if f == nil {
		t.Fatalf("no pad file in %v", slices.Sorted(maps.Keys(bodies)))
	}
	if f.Method != zip.Store || f.UncompressedSize64 != pad || f.CompressedSize64 != pad {
		t.Errorf("pad entry: method %d, sizes %d/%d; want stored, %d", f.Method, f.CompressedSize64, f.UncompressedSize64, pad)
	}
	// Random bytes do not compress: gzip of the pad is no smaller.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bodies["padded/"+PadFile])
	zw.Close()
	if gz.Len() < pad {
		t.Errorf("the pad compresses to %d bytes", gz.Len())
	}
	checkRecord(t, bodies, "padded-0.1.dist-info/RECORD")
}

func TestWheelInstallsWithPip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Wheel(dir, "Fixture_Demo", "1.0.0", WheelOptions{
		ExtraSource: "def answer():\n    return 6 * 7\n",
		Requires:    []string{"fixture-dep>=2"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := Wheel(dir, "fixture-dep", "2.1", WheelOptions{Modules: []string{"dep_one", "dep_two"}}); err != nil {
		t.Fatal(err)
	}
	// A lower version that must not be picked over 2.1.
	if _, err := Wheel(dir, "fixture-dep", "1.0", WheelOptions{}); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	mustPip(t, "--no-index", "--find-links", dir, "--target", target, "fixture.demo")

	got := importFrom(t, target, "import Fixture_Demo, dep_one, dep_two\n"+
		"print(Fixture_Demo.VALUE); print(Fixture_Demo.__version__); print(Fixture_Demo.answer())\n"+
		"print(dep_one.VALUE); print(dep_two.__version__)")
	want := "Fixture_Demo 1.0.0\n1.0.0\n42\nfixture-dep 2.1\n2.1"
	if got != want {
		t.Errorf("imported:\n%s\nwant:\n%s", got, want)
	}
	// pip checked RECORD and wrote its own: the dist-info is there.
	if _, err := os.Stat(filepath.Join(target, "fixture_demo-1.0.0.dist-info", "METADATA")); err != nil {
		t.Error(err)
	}
}

func TestPaddedWheelInstallsWithPip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const pad = 1 << 20
	if _, err := Wheel(dir, "padded", "0.1", WheelOptions{PadBytes: pad}); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	mustPip(t, "--no-index", "--find-links", dir, "--target", target, "padded==0.1")
	st, err := os.Stat(filepath.Join(target, "padded", PadFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != pad {
		t.Errorf("installed pad is %d bytes, want %d", st.Size(), pad)
	}
	if got := importFrom(t, target, "import padded; print(padded.VALUE)"); got != "padded 0.1" {
		t.Errorf("VALUE %q", got)
	}
}

func TestSdistLayout(t *testing.T) {
	dir := t.TempDir()
	path, err := Sdist(dir, "Src-Only", "0.3")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "src_only-0.3.tar.gz" {
		t.Errorf("file name %s", filepath.Base(path))
	}
	if !policy.IsSdistFilename(filepath.Base(path)) {
		t.Error("policy does not take it for an sdist")
	}
	if _, _, ok := policy.ParseWheelFilename(filepath.Base(path)); ok {
		t.Error("policy takes the sdist for a wheel")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			files[h.Name] = string(b)
		}
	}
	for name, want := range map[string]string{
		"src_only-0.3/setup.py":             `setup(name="Src-Only", version="0.3", packages=["Src_Only"])`,
		"src_only-0.3/PKG-INFO":             "Name: Src-Only\nVersion: 0.3\n",
		"src_only-0.3/Src_Only/__init__.py": `VALUE = "Src-Only 0.3"`,
	} {
		if !strings.Contains(files[name], want) {
			t.Errorf("%s: %q lacks %q", name, files[name], want)
		}
	}
	if len(files) != 3 {
		t.Errorf("files %v", files)
	}
}

// TestSdistWithPip shows that the sdist is a real one, which pip builds
// and installs, and that --only-binary=:all: is what refuses it.
func TestSdistWithPip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Sdist(dir, "src-only", "0.3"); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	out, err := pip(t, "--no-index", "--find-links", dir, "--only-binary=:all:", "--target", target, "src-only")
	if err == nil {
		t.Fatalf("--only-binary=:all: installed an sdist:\n%s", out)
	}
	if !strings.Contains(out, "No matching distribution found for src-only") {
		t.Errorf("pip's refusal:\n%s", out)
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Errorf("the refused install left %v", entries)
	}

	// The host's setuptools builds it when source builds are allowed
	// (Debian's python3-pip depends on setuptools and wheel).
	mustPip(t, "--no-index", "--no-build-isolation", "--find-links", dir, "--target", target, "src-only")
	if got := importFrom(t, target, "import src_only; print(src_only.VALUE)"); got != "src-only 0.3" {
		t.Errorf("VALUE %q", got)
	}
}

func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header.Get("Location")
}

func TestIndexPages(t *testing.T) {
	dir := t.TempDir()
	wheel, err := Wheel(dir, "Idx_Demo", "1.0", WheelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sdist, err := Sdist(dir, "idx-demo", "1.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Sdist(dir, "other.project", "2.0"); err != nil {
		t.Fatal(err)
	}
	// Not distributions: never listed or served.
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, ".pipfixture-123"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub-1.0.tar.gz"), 0o755)

	idx, err := ServeIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	if !regexp.MustCompile(`^http://127\.0\.0\.1:[0-9]+/simple$`).MatchString(idx.URL) {
		t.Fatalf("URL %s", idx.URL)
	}
	base := strings.TrimSuffix(idx.URL, "/simple")

	code, body, _ := get(t, idx.URL+"/")
	if code != 200 || !strings.Contains(body, `<a href="idx-demo/">idx-demo</a>`) ||
		!strings.Contains(body, `<a href="other-project/">other-project</a>`) || strings.Contains(body, "sub") ||
		strings.Contains(body, "notes") {
		t.Errorf("/simple/: %d\n%s", code, body)
	}

	code, body, _ = get(t, idx.URL+"/idx-demo/")
	if code != 200 {
		t.Fatalf("/simple/idx-demo/: %d", code)
	}
	for _, p := range []string{wheel, sdist} {
		b, _ := os.ReadFile(p)
		sum := sha256.Sum256(b)
		fn := filepath.Base(p)
		link := fmt.Sprintf(`<a href="../../files/%s#sha256=%s">%s</a>`, fn, hex.EncodeToString(sum[:]), fn)
		if !strings.Contains(body, link) {
			t.Errorf("project page lacks %s:\n%s", link, body)
		}
	}
	if strings.Contains(body, "data-requires-python") {
		t.Error("data-requires-python must be left out")
	}

	// Unnormalized names redirect to the normalized page.
	for _, p := range []string{"/Idx_Demo/", "/idx.demo/", "/idx-demo"} {
		code, _, loc := get(t, idx.URL+p)
		if code != http.StatusMovedPermanently || loc != "/simple/idx-demo/" {
			t.Errorf("%s: %d to %q", p, code, loc)
		}
	}
	for _, p := range []string{"/simple/unknown/", "/simple/unknown", "/simple/idx-demo/x/", "/files/missing-1.0-py3-none-any.whl",
		"/files/notes.txt", "/files/.pipfixture-123", "/files/sub-1.0.tar.gz", "/files/", "/files/..%2Fetc%2Fpasswd", "/other"} {
		if code, _, _ := get(t, base+p); code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, code)
		}
	}

	code, body, _ = get(t, base+"/files/"+filepath.Base(wheel))
	if b, _ := os.ReadFile(wheel); code != 200 || body != string(b) {
		t.Errorf("/files/ wheel: %d, %d bytes", code, len(body))
	}
	// Files written after the start are served too.
	late, err := Wheel(dir, "late", "0.1", WheelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, idx.URL+"/late/"); code != 200 || !strings.Contains(body, filepath.Base(late)) {
		t.Errorf("/simple/late/: %d\n%s", code, body)
	}

	if n := idx.Requests("/simple/idx-demo/"); n != 1 {
		t.Errorf("Requests(/simple/idx-demo/) = %d, want 1", n)
	}
	if n := idx.Requests("/simple/unknown/"); n != 1 {
		t.Errorf("404s count too: %d", n)
	}
	if n := idx.Requests("/files/" + filepath.Base(wheel)); n != 1 {
		t.Errorf("Requests(wheel) = %d, want 1", n)
	}
	if n := idx.Requests("/never"); n != 0 {
		t.Errorf("Requests(/never) = %d", n)
	}
	if err := idx.Close(); err != nil {
		t.Error(err)
	}
	if _, err := http.Get(idx.URL + "/"); err == nil {
		t.Error("the index still answers after Close")
	}
	if _, err := ServeIndex(filepath.Join(dir, "missing")); err == nil {
		t.Error("ServeIndex of a missing directory succeeded")
	}
}

func TestIndexWithPip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, v := range []string{"1.0", "2.0"} {
		if _, err := Wheel(dir, "idx-demo", v, WheelOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Sdist(dir, "src-only", "0.3"); err != nil {
		t.Fatal(err)
	}
	idx, err := ServeIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()

	target := t.TempDir()
	mustPip(t, "--index-url", idx.URL, "--target", target, "Idx_Demo==1.0")
	if got := importFrom(t, target, "import idx_demo; print(idx_demo.VALUE)"); got != "idx-demo 1.0" {
		t.Errorf("VALUE %q", got)
	}
	if n := idx.Requests("/simple/idx-demo/"); n < 1 {
		t.Errorf("pip never read the project page")
	}
	if n := idx.Requests("/files/" + WheelFilename("idx-demo", "1.0")); n != 1 {
		t.Errorf("the 1.0 wheel was fetched %d times, want 1", n)
	}
	if n := idx.Requests("/files/" + WheelFilename("idx-demo", "2.0")); n != 0 {
		t.Errorf("the 2.0 wheel was fetched %d times, want 0", n)
	}

	out, err := pip(t, "--index-url", idx.URL, "--only-binary=:all:", "--target", t.TempDir(), "src-only")
	if err == nil {
		t.Fatalf("--only-binary=:all: installed an sdist from the index:\n%s", out)
	}
	if !strings.Contains(out, "No matching distribution found for src-only") {
		t.Errorf("pip's refusal:\n%s", out)
	}
	if idx.Requests("/simple/src-only/") < 1 {
		t.Error("pip never asked for src-only")
	}
	if n := idx.Requests("/files/" + SdistFilename("src-only", "0.3")); n != 0 {
		t.Errorf("the refused sdist was downloaded %d times", n)
	}

	out, err = pip(t, "--index-url", idx.URL, "--target", t.TempDir(), "no-such-project")
	if err == nil || !strings.Contains(out, "No matching distribution found for no-such-project") {
		t.Errorf("an unknown project: %v\n%s", err, out)
	}
	if idx.Requests("/simple/no-such-project/") < 1 {
		t.Error("pip never asked for no-such-project")
	}
}
