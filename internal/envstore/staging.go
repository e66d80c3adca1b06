package envstore

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Staging is one build in progress: a root and a layer directory that
// become an environment at Commit, or vanish at Abort.
type Staging struct {
	dir   string
	store *Store
	// held is the staging directory, open and flocked while the build
	// lives, so a sweep (another process's Open) leaves it alone.
	held *os.File
	once sync.Once
}

// Stage starts a build.
func (s *Store) Stage() (*Staging, error) {
	dir, err := os.MkdirTemp(s.path(stagingDir), "b-")
	if err != nil {
		return nil, fmt.Errorf("envstore: stage: %w", err)
	}
	st := &Staging{dir: dir, store: s}
	if st.held, err = os.Open(dir); err != nil || !tryLock(st.held) {
		if st.held != nil {
			st.held.Close()
		}
		os.RemoveAll(dir)
		return nil, fmt.Errorf("envstore: stage: cannot hold %s: %v", dir, err)
	}
	for _, sub := range []string{st.Root(), st.Layer()} {
		if err := os.Mkdir(sub, 0o755); err != nil {
			st.Abort()
			return nil, fmt.Errorf("envstore: stage: %w", err)
		}
	}
	return st, nil
}

// Root is where the build puts its root filesystem (left empty: the
// environment has none of its own).
func (st *Staging) Root() string { return st.dir + "/root" }

// Layer is where the build puts its Python packages layer (left empty: none).
func (st *Staging) Layer() string { return st.dir + "/layer" }

// Abort removes everything the build made. It is safe to call more than
// once and after Commit (then it does nothing).
func (st *Staging) Abort() {
	st.once.Do(func() {
		removeTree(st.dir)
		st.held.Close()
	})
}

// sweepStaging removes the staging of builds that died with their
// process (their directory is no longer flocked).
func (s *Store) sweepStaging() error {
	ents, err := os.ReadDir(s.path(stagingDir))
	if err != nil {
		return fmt.Errorf("envstore: %w", err)
	}
	for _, de := range ents {
		p := filepath.Join(s.path(stagingDir), de.Name())
		if de.IsDir() {
			f, err := os.Open(p)
			if err != nil {
				continue
			}
			free := tryLock(f)
			if free {
				removeTree(p)
			}
			f.Close()
			continue
		}
		os.Remove(p)
	}
	return nil
}

// removeTree removes path and everything under it, making directories
// writable first when a plain removal is refused (roots keep a build's
// read-only directories).
func removeTree(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}
