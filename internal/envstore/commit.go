package envstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// Commit hashes the staging's root and layer, moves them into place (or
// keeps the identical ones already there), and records meta under its
// name, filling ID, RootDir, LayerDir and Size. An empty staged root or
// layer keeps meta's RootDir or LayerDir (a layer over a base's root, or
// "" for the host's). Whatever the outcome the staging is gone after
// Commit: a failed build leaves nothing behind.
func (s *Store) Commit(st *Staging, meta Env) (Env, error) {
	defer st.Abort()
	if err := checkName(meta.Name); err != nil {
		return Env{}, err
	}
	if _, err := os.Lstat(s.recordPath(meta.Name)); err == nil {
		return Env{}, ErrExists // cheap early answer; checked again under the lock
	}
	uid, gid := os.Getuid(), os.Getgid()
	root, err := sealTree(st.Root(), uid, gid)
	if err != nil {
		return Env{}, fmt.Errorf("envstore: root: %w", err)
	}
	layer, err := sealTree(st.Layer(), uid, gid)
	if err != nil {
		return Env{}, fmt.Errorf("envstore: layer: %w", err)
	}

	unlock, err := s.lock()
	if err != nil {
		return Env{}, err
	}
	defer unlock()
	if _, err := os.Lstat(s.recordPath(meta.Name)); err == nil {
		return Env{}, ErrExists
	}
	e := meta
	if !root.empty {
		if e.RootDir, err = s.place(st.Root(), rootsDir, root.hex); err != nil {
			return Env{}, err
		}
	}
	if !layer.empty {
		if e.LayerDir, err = s.place(st.Layer(), layersDir, layer.hex); err != nil {
			return Env{}, err
		}
	}
	e.Size = root.size + layer.size
	e.ID = contentID(e.RootDir, root, e.LayerDir, layer)
	e.Created = time.Now().UTC().Truncate(time.Millisecond)
	if err := s.createRecord(e); err != nil {
		return Env{}, err
	}
	return e, nil
}

// place moves a sealed tree to kind/<hex>, unless an identical one is
// there already (then the staged copy goes with the staging).
func (s *Store) place(staged, kind, hexsum string) (string, error) {
	dst := s.path(kind, hexsum)
	if _, err := os.Lstat(dst); err == nil {
		return dst, nil
	}
	if err := os.Rename(staged, dst); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return dst, nil
		}
		return "", fmt.Errorf("envstore: %w", err)
	}
	if err := syncDir(s.path(kind)); err != nil {
		return "", err
	}
	return dst, nil
}

// contentID names an environment's content: its own root and layer by
// hash, or the directories it borrows by path.
func contentID(rootDir string, root treeSum, layerDir string, layer treeSum) string {
	part := func(dir string, t treeSum) string {
		if !t.empty {
			return "sha256:" + t.hex
		}
		return "dir:" + dir
	}
	h := sha256.Sum256([]byte("root\x00" + part(rootDir, root) + "\x00layer\x00" + part(layerDir, layer)))
	return "sha256:" + hex.EncodeToString(h[:])
}
