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
	h := sha256.New()
	var sum treeSum
	sum.empty = true
	seen := map[[2]uint64]bool{}
	buf := make([]byte, 256<<10)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			if err := os.Lchown(p, uid, gid); err != nil {
				return err
			}
			return os.Chmod(p, 0o755)
		}
		sum.empty = false
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		mode := fi.Mode()
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
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
			return fmt.Errorf("%w: device node at %s (an environment may hold none)", ErrBadImage, rel)
		default:
			return fmt.Errorf("%w: unsupported file type %v at %s", ErrBadImage, mode.Type(), rel)
		}
		if kind != 'l' {
			if err := os.Chmod(p, perm); err != nil {
				return err
			}
		} else {
			perm = 0o777
		}
		writeField(h, []byte(filepath.ToSlash(rel)))
		writeField(h, []byte{kind})
		writeField(h, binary.BigEndian.AppendUint32(nil, uint32(perm)))
		switch kind {
		case 'l':
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			writeField(h, []byte(target))
			sum.size += int64(len(target))
		case 'f':
			digest, n, err := fileSum(p, buf)
			if err != nil {
				return err
			}
			writeField(h, digest)
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
				key := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
				if seen[key] {
					return nil
				}
				seen[key] = true
			}
			sum.size += n
		}
		return nil
	})
	if err != nil {
		return treeSum{}, err
	}
	if !sum.empty {
		sum.hex = hex.EncodeToString(h.Sum(nil))
	}
	return sum, nil
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
