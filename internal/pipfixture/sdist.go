package pipfixture

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// SdistFilename is the file name [Sdist] gives a project's source
// distribution: {name}-{version}.tar.gz with the name escaped as in wheels
// (PEP 625).
func SdistFilename(name, version string) string {
	return escapedName(name) + "-" + strings.ReplaceAll(version, "-", "_") + ".tar.gz"
}

// Sdist writes a source distribution of project name at version into dir
// and returns its path: a .tar.gz whose one top-level directory holds
// setup.py, PKG-INFO and the module [ModuleName] of the project, whose
// __init__.py is the one [Wheel] writes. Installing it means running
// setup.py, which is what a wheels-only install must refuse.
func Sdist(dir, name, version string) (string, error) {
	if err := checkNameVersion(name, version); err != nil {
		return "", err
	}
	fn := SdistFilename(name, version)
	top := strings.TrimSuffix(fn, ".tar.gz")
	mod := ModuleName(name)
	files := []struct{ name, body string }{
		{"PKG-INFO", metadata(name, version, nil)},
		{"setup.py", fmt.Sprintf("from setuptools import setup\n\nsetup(name=%q, version=%q, packages=[%q])\n", name, version, mod)},
		{mod + "/__init__.py", moduleSource(name, version, "")},
	}
	err := writeAtomically(dir, fn, func(f io.Writer) error {
		zw := gzip.NewWriter(f)
		tw := tar.NewWriter(zw)
		for _, d := range []string{top + "/", top + "/" + mod + "/"} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: fixedTime, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		for _, e := range files {
			h := &tar.Header{Typeflag: tar.TypeReg, Name: top + "/" + e.name, Mode: 0o644, Size: int64(len(e.body)), ModTime: fixedTime, Format: tar.FormatPAX}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := io.WriteString(tw, e.body); err != nil {
				return err
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, fn), nil
}
