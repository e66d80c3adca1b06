package pipfixture

import (
	"archive/zip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// WheelFromTree writes a wheel of project name at version whose top-level
// packages are copies of host directories (module name -> directory), and
// returns its path: a wheelhouse of real, large packages (the host's numpy
// and pandas) where no package index can be reached. Files under
// __pycache__ are left out; symlinks and special files are refused.
func WheelFromTree(dir, name, version string, trees map[string]string, requires []string) (string, error) {
	if err := checkNameVersion(name, version); err != nil {
		return "", err
	}
	modules := make([]string, 0, len(trees))
	for m := range trees {
		if !identifier.MatchString(m) {
			return "", fmt.Errorf("pipfixture: module %q is not a Python identifier", m)
		}
		modules = append(modules, m)
	}
	slices.Sort(modules)
	distInfo := escapedName(name) + "-" + strings.ReplaceAll(version, "-", "_") + ".dist-info"
	fn := WheelFilename(name, version)
	err := writeAtomically(dir, fn, func(f io.Writer) error {
		w := &wheelWriter{zw: zip.NewWriter(f)}
		for _, m := range modules {
			if err := w.addTree(m, trees[m]); err != nil {
				return err
			}
		}
		w.add(distInfo+"/METADATA", metadata(name, version, requires))
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

// addTree adds every regular file under src as module/<relative path>.
func (w *wheelWriter) addTree(module, src string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("pipfixture: %s is not a regular file", p)
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		w.add(module+"/"+filepath.ToSlash(rel), string(body))
		return w.err
	})
}
