package envstore

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// GCReport says what a collection freed.
type GCReport struct {
	Roots, Layers int
	Bytes         int64
}

// GC removes roots and layers no record uses.
func (s *Store) GC() (GCReport, error) {
	unlock, err := s.lock()
	if err != nil {
		return GCReport{}, err
	}
	defer unlock()
	envs, err := s.List()
	if err != nil {
		return GCReport{}, err
	}
	used := map[string]bool{}
	for _, e := range envs {
		used[filepath.Clean(e.RootDir)] = true
		used[filepath.Clean(e.LayerDir)] = true
	}
	var rep GCReport
	for _, kind := range []string{rootsDir, layersDir} {
		ents, err := os.ReadDir(s.path(kind))
		if err != nil {
			return rep, fmt.Errorf("envstore: gc: %w", err)
		}
		for _, de := range ents {
			p := s.path(kind, de.Name())
			if used[p] {
				continue
			}
			n := treeBytes(p)
			if err := removeTree(p); err != nil {
				return rep, fmt.Errorf("envstore: gc: %w", err)
			}
			rep.Bytes += n
			if kind == rootsDir {
				rep.Roots++
			} else {
				rep.Layers++
			}
		}
	}
	return rep, nil
}

// treeBytes is the bytes the regular files under p take.
func treeBytes(p string) int64 {
	var n int64
	filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
