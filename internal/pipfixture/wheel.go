// Package pipfixture makes what tests of pip_install need: small pure-Python
// wheels and sdists that the real pip accepts, and a PEP 503 simple index
// on the loopback interface that counts what pip fetched.
package pipfixture

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/policy"
)

// WheelOptions shape a wheel made by [Wheel]. The zero value makes one
// package named after the project.
type WheelOptions struct {
	// Modules are the top-level packages, each a directory with an
	// __init__.py; nil means one, [ModuleName] of the project.
	Modules []string
	// ExtraSource is appended to every module's __init__.py.
	ExtraSource string
	// Requires are Requires-Dist lines, such as "other>=1.0".
	Requires []string
	// PadBytes, if positive, adds a file of that many random bytes,
	// stored uncompressed, so that the wheel is at least that large.
	PadBytes int64
	// Files are more files by slash-separated path inside the wheel (a
	// .pth file, a module outside the packages); they are listed in RECORD.
	Files map[string]string
}

// PadFile is the path, inside the first module, of the file PadBytes adds.
const PadFile = "_pad.bin"

// fixedTime keeps the zip entries, and so the wheels, reproducible.
var fixedTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ModuleName is the module a wheel gets by default: the project name with
// "-" and "." made "_".
func ModuleName(name string) string {
	return strings.NewReplacer("-", "_", ".", "_").Replace(name)
}

// escapedName is the name as wheel and sdist file names spell it:
// normalized, with "_" for "-".
func escapedName(name string) string {
	return strings.ReplaceAll(policy.NormalizePackageName(name), "-", "_")
}

// WheelFilename is the file name [Wheel] gives a project's wheel, per
// PEP 427.
func WheelFilename(name, version string) string {
	return escapedName(name) + "-" + strings.ReplaceAll(version, "-", "_") + "-py3-none-any.whl"
}

// checkNameVersion refuses what would not make a valid distribution, and
// anything that could take a file out of dir.
func checkNameVersion(name, version string) error {
	r, err := policy.ParseRequirement(name, version)
	if err != nil {
		return fmt.Errorf("pipfixture: %w", err)
	}
	if len(r.Extras) > 0 || r.Name != name || r.Specifier != "=="+version || strings.Contains(version, "*") {
		return fmt.Errorf("pipfixture: want a plain project name and version, not %q %q", name, version)
	}
	return nil
}

// Wheel writes a pure-Python wheel of project name at version into dir and
// returns its path. The wheel installs with the real pip: it has the
// modules, METADATA, WHEEL, top_level.txt and a RECORD with the digest and
// size of every file.
func Wheel(dir, name, version string, opts WheelOptions) (string, error) {
	if err := checkNameVersion(name, version); err != nil {
		return "", err
	}
	modules := opts.Modules
	if len(modules) == 0 {
		modules = []string{ModuleName(name)}
	}
	for _, m := range modules {
		if !identifier.MatchString(m) {
			return "", fmt.Errorf("pipfixture: module %q is not a Python identifier", m)
		}
	}
	extra := make([]string, 0, len(opts.Files))
	for p := range opts.Files {
		if p == "" || path.IsAbs(p) || path.Clean(p) != p || strings.HasPrefix(p, "../") || p == ".." {
			return "", fmt.Errorf("pipfixture: file path %q is not a clean relative path", p)
		}
		extra = append(extra, p)
	}
	slices.Sort(extra)

	distInfo := escapedName(name) + "-" + strings.ReplaceAll(version, "-", "_") + ".dist-info"
	fn := WheelFilename(name, version)
	err := writeAtomically(dir, fn, func(f io.Writer) error {
		w := &wheelWriter{zw: zip.NewWriter(f)}
		for _, m := range modules {
			w.add(m+"/__init__.py", moduleSource(name, version, opts.ExtraSource))
		}
		if opts.PadBytes > 0 {
			w.addPad(modules[0]+"/"+PadFile, opts.PadBytes, name+"-"+version)
		}
		for _, p := range extra {
			w.add(p, opts.Files[p])
		}
		w.add(distInfo+"/METADATA", metadata(name, version, opts.Requires))
		w.add(distInfo+"/WHEEL", "Wheel-Version: 1.0\nGenerator: codecage-pipfixture\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
		w.add(distInfo+"/top_level.txt", strings.Join(modules, "\n")+"\n")
		w.addRecord(distInfo + "/RECORD")
		if w.err != nil {
			return w.err
		}
		return w.zw.Close()
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, fn), nil
}

func moduleSource(name, version, extra string) string {
	s := fmt.Sprintf("__version__ = %q\nVALUE = %q\n", version, name+" "+version)
	if extra != "" {
		s += extra
		if !strings.HasSuffix(extra, "\n") {
			s += "\n"
		}
	}
	return s
}

func metadata(name, version string, requires []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: codecage test fixture\n", name, version)
	for _, r := range requires {
		fmt.Fprintf(&b, "Requires-Dist: %s\n", r)
	}
	return b.String()
}

// wheelWriter adds entries to a wheel and remembers their RECORD rows; the
// first error sticks.
type wheelWriter struct {
	zw     *zip.Writer
	record [][]string
	err    error
}

func (w *wheelWriter) create(name string, method uint16) io.Writer {
	if w.err != nil {
		return nil
	}
	h := &zip.FileHeader{Name: name, Method: method, Modified: fixedTime}
	h.SetMode(0o644)
	f, err := w.zw.CreateHeader(h)
	w.err = err
	return f
}

func (w *wheelWriter) add(name, body string) {
	f := w.create(name, zip.Deflate)
	if f == nil {
		return
	}
	if _, err := io.WriteString(f, body); err != nil {
		w.err = err
		return
	}
	sum := sha256.Sum256([]byte(body))
	w.record = append(w.record, recordRow(name, sum[:], int64(len(body))))
}

// addPad stores n pseudo-random bytes: random, so that compression cannot
// shrink them; stored, so that the wheel's size is what the test asked.
// The seed comes from the project so that the wheel is reproducible.
func (w *wheelWriter) addPad(name string, n int64, seed string) {
	f := w.create(name, zip.Store)
	if f == nil {
		return
	}
	var key [32]byte
	copy(key[:], seed)
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(rand.NewChaCha8(key), n)); err != nil {
		w.err = err
		return
	}
	w.record = append(w.record, recordRow(name, h.Sum(nil), n))
}

func (w *wheelWriter) addRecord(name string) {
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	cw.UseCRLF = false
	// RECORD cannot hold its own digest: it lists itself with none.
	rows := append(w.record, []string{name, "", ""})
	if err := cw.WriteAll(rows); err != nil {
		w.err = err
		return
	}
	f := w.create(name, zip.Deflate)
	if f == nil {
		return
	}
	_, w.err = f.Write(buf.Bytes())
}

func recordRow(name string, sum []byte, size int64) []string {
	return []string{name, "sha256=" + base64.RawURLEncoding.EncodeToString(sum), fmt.Sprint(size)}
}

// writeAtomically writes dir/fn through a temporary file, so that an index
// serving dir never offers a half-written file.
func writeAtomically(dir, fn string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(dir, ".pipfixture-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, fn))
}
