package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestOnlyTheLoaderReadsSandboxVariables fails when a non-test Go file
// outside this package reads a SANDBOX_* variable itself: every setting
// goes through Load, so that a flag, the environment and a --config file
// all set it, and docs/configuration.md's reference is the whole list. It catches
// os.Getenv/LookupEnv("SANDBOX_..."), helpers such as envOr("SANDBOX_..."),
// and scans of os.Environ() for the prefix.
func TestOnlyTheLoaderReadsSandboxVariables(t *testing.T) {
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := here
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatal("no go.mod above", here)
		}
		root = parent
	}
	envFunc := regexp.MustCompile(`(?i)env`)
	var bad []string
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == here {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		environ, prefixScan := false, false
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				name := calleeName(n.Fun)
				if name == "os.Environ" || name == "syscall.Environ" {
					environ = true
				}
				if !envFunc.MatchString(name) {
					return true
				}
				for _, a := range n.Args {
					if s, ok := stringLit(a); ok && strings.HasPrefix(s, "SANDBOX_") {
						bad = append(bad, fset.Position(n.Pos()).String()+": "+name+"("+strconv.Quote(s)+")")
					}
				}
			case *ast.BasicLit:
				if s, ok := stringLit(n); ok && s == "SANDBOX_" {
					prefixScan = true
				}
			}
			return true
		})
		if environ && prefixScan {
			bad = append(bad, rel+": scans os.Environ() for SANDBOX_ variables")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("only %d Go files found under %s: the walk missed the repository", files, root)
	}
	for _, b := range bad {
		t.Errorf("%s: SANDBOX_* variables are read only by the config loader; add a setting there instead", b)
	}
}

// calleeName is "pkg.Func", "recv.Method" or "func" for a call's function.
func calleeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			return x.Name + "." + e.Sel.Name
		}
		return e.Sel.Name
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
