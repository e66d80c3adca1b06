package envstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// treeSum is what sealing a tree found: its content hash ("" for an
// empty tree) and the bytes its files take (hard links counted once).
type treeSum struct {
	hex   string
	size  int64
	empty bool
}

// sealTree makes the tree under dir the operator's (owner uid:gid, no
// group/other write, no setuid/setgid), refuses device nodes and sockets,
// and hashes it: each entry in lexical path order as its path, type,
// permission bits, then the link target or the content's sha256.
// Owners and times are not hashed, so identical content hashes the same
// whoever built it, whenever.
func sealTree(dir string, uid, gid int) (treeSum, error) {
	s := &sealer{dir: dir, uid: uid, gid: gid, h: sha256.New(), seen: map[[2]uint64]bool{}, buf: make([]byte, 256<<10)}
	s.sum.empty = true
	if err := filepath.WalkDir(dir, s.visit); err != nil {
		return treeSum{}, err
	}
	if !s.sum.empty {
		s.sum.hex = hex.EncodeToString(s.h.Sum(nil))
	}
	return s.sum, nil
}

// sealer is one sealTree's walk.
type sealer struct {
	dir      string
	uid, gid int
	h        hash.Hash
	sum      treeSum
	seen     map[[2]uint64]bool // hard-linked files already counted in sum.size
	buf      []byte
}

// visit seals and hashes the entry at p.
func (s *sealer) visit(p string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(s.dir, p)
	if err != nil {
		return err
	}
	if rel == "." {
		if err := os.Lchown(p, s.uid, s.gid); err != nil {
			return err
		}
		return os.Chmod(p, 0o755)
	}
	s.sum.empty = false
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if err := os.Lchown(p, s.uid, s.gid); err != nil {
		return err
	}
	kind, perm, err := sealMode(p, rel, fi.Mode())
	if err != nil {
		return err
	}
	writeField(s.h, []byte(filepath.ToSlash(rel)))
	writeField(s.h, []byte{kind})
	writeField(s.h, binary.BigEndian.AppendUint32(nil, uint32(perm)))
	switch kind {
	case 'l':
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		writeField(s.h, []byte(target))
		s.sum.size += int64(len(target))
	case 'f':
		return s.hashContent(p, fi)
	}
	return nil
}

// sealMode refuses what an environment may not hold, and takes group and
// other write away (setuid and setgid too; the sticky bit stays): it
// returns the entry's kind and the permission bits hashed, which are a
// link's 0777.
func sealMode(p, rel string, mode fs.FileMode) (byte, fs.FileMode, error) {
	perm := mode.Perm() &^ 0o022
	if mode&fs.ModeSticky != 0 {
		perm |= fs.ModeSticky
	}
	var kind byte
	switch {
	case mode.IsRegular():
		kind = 'f'
	case mode.IsDir():
		kind = 'd'
	case mode&fs.ModeSymlink != 0:
		kind = 'l'
	case mode&fs.ModeNamedPipe != 0:
		kind = 'p'
	case mode&fs.ModeDevice != 0:
		return 0, 0, fmt.Errorf("%w: device node at %s (an environment may hold none)", ErrBadImage, rel)
	default:
		return 0, 0, fmt.Errorf("%w: unsupported file type %v at %s", ErrBadImage, mode.Type(), rel)
	}
	if kind == 'l' {
		return kind, 0o777, nil
	}
	if err := os.Chmod(p, perm); err != nil {
		return 0, 0, err
	}
	return kind, perm, nil
}

// hashContent hashes a regular file's content and counts its bytes, a
// hard-linked file's once.
func (s *sealer) hashContent(p string, fi fs.FileInfo) error {
	digest, n, err := fileSum(p, s.buf)
	if err != nil {
		return err
	}
	writeField(s.h, digest)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		key := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		if s.seen[key] {
			return nil
		}
		s.seen[key] = true
	}
	s.sum.size += n
	return nil
}

// writeField writes b length-prefixed, so no two trees share an encoding.
func writeField(h hash.Hash, b []byte) {
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
	h.Write(b)
}

// fileSum is the sha256 of a regular file's content (never through a
// symlink) and its length.
func fileSum(p string, buf []byte) ([]byte, int64, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, buf)
	if err != nil {
		return nil, 0, err
	}
	return h.Sum(nil), n, nil
}
