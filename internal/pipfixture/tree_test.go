package pipfixture

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWheelFromTreeInstallsWithPip: a wheel of a host directory installs
// with the real pip and imports, its subpackages and data files with it;
// __pycache__ is left out.
func TestWheelFromTreeInstallsWithPip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "pkg")
	for p, body := range map[string]string{
		"__init__.py":                 "from .sub import answer\n",
		"sub/__init__.py":             "def answer():\n    return 42\n",
		"data/table.txt":              "rows\n",
		"__pycache__/junk.pyc":        "not python",
		"sub/__pycache__/x.pyc":       "not python",
		"sub/deeper/__init__.py":      "NAME = 'deeper'\n",
		"sub/deeper/notes.md":         "# notes\n",
		"sub/deeper/values.json":      "[1, 2]\n",
		"sub/deeper/more/mod.py":      "X = 1\n",
		"sub/deeper/more/__init__.py": "",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	house := t.TempDir()
	whl, err := WheelFromTree(house, "tree-demo", "2.0", map[string]string{"treedemo": src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	mustPip(t, "--no-index", "--target", target, whl)
	got := importFrom(t, target, "import treedemo, treedemo.sub.deeper.more.mod as m, os\n"+
		"print(treedemo.answer(), treedemo.sub.deeper.NAME, m.X, os.path.exists(os.path.join(os.path.dirname(treedemo.__file__), 'data', 'table.txt')))")
	if got != "42 deeper 1 True" {
		t.Fatalf("imported %q, want 42 deeper 1 True", got)
	}
	if _, err := os.Stat(filepath.Join(target, "treedemo", "__pycache__", "junk.pyc")); !os.IsNotExist(err) {
		t.Fatalf("__pycache__ was packed: %v", err)
	}
	link := filepath.Join(src, "link")
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	if _, err := WheelFromTree(house, "tree-demo", "2.1", map[string]string{"treedemo": src}, nil); err == nil {
		t.Fatal("a tree holding a symlink was packed")
	}
}
