package snapstore

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// File sets: a blob that is a directory of files written by another
// program (gVisor's memory image: runsc writes its files into a directory
// and reads them from one). Each file is a blob of its own, named
// "set/file", with a chunked MAC (chunkmac.go).
//
// The directory backend keeps the files where the program wrote them,
// inside the snapshot being written, and hands out the directory they sit
// in once they are verified: a memory image of hundreds of megabytes is
// neither copied in nor out. Other backends (PostgreSQL) go through a
// temporary directory, copied in at Commit and out by Snapshot.Files.

// localTxn is a txn that can give a file set a directory of its own.
type localTxn interface {
	// localDir makes the set's directory and returns its path.
	localDir(name string) (string, error)
	// openFile opens a file of a set, refusing anything but a regular
	// file (a symbolic link, a directory).
	openFile(set, file string) (*os.File, error)
	// listDir lists the set's directory.
	listDir(set string) ([]string, error)
}

// localView is a view whose file sets are directories to read in place.
type localView interface {
	localDir(name string) string
	listDir(set string) ([]string, error)
	// unchanged checks that the set's file, as opened for its
	// verification, is still the one at its path and was not written
	// since.
	unchanged(set, file string) error
}

// MaxSetFiles bounds the files of one file set.
const MaxSetFiles = 16

// fileSet is a set being written.
type fileSet struct {
	name, dir string
	local     bool // dir is inside the store
}

// Files starts a file set: the caller (or a program it runs) writes
// regular files, and nothing else, into the returned directory (empty,
// mode 0700), which must stay untouched after Commit. They are sealed at
// Commit: each MACed and flushed to disk before the snapshot becomes
// visible: a snapshot its caller was told of outlives a crash (it is
// often taken because its session is about to end).
func (w *Writer) Files(name string) (string, error) {
	if w.err != nil {
		return "", w.err
	}
	if err := checkBlobName(name); err != nil {
		return "", w.fail(err)
	}
	if w.names[name] {
		return "", w.fail(fmt.Errorf("%w: blob %s written twice", ErrInvalid, name))
	}
	if lt, ok := w.tx.(localTxn); ok {
		dir, err := lt.localDir(name)
		if err != nil {
			return "", w.fail(err)
		}
		w.names[name] = true
		w.sets = append(w.sets, &fileSet{name: name, dir: dir, local: true})
		return dir, nil
	}
	dir, err := tempDir(w.s.o.TempDir)
	if err != nil {
		return "", w.fail(fmt.Errorf("%w: a directory for blob %s: %v", ErrUnavailable, name, err))
	}
	w.names[name] = true
	w.sets = append(w.sets, &fileSet{name: name, dir: dir})
	return dir, nil
}

// sealSets adds each file set's files to the manifest (Commit).
func (w *Writer) sealSets() error {
	for _, set := range w.sets {
		var err error
		if set.local {
			err = w.sealLocal(set)
		} else {
			err = w.copySet(set)
		}
		if err != nil {
			return w.fail(err)
		}
	}
	if len(w.sets) > 0 {
		w.m.Version = fileSetVersion
	}
	return nil
}

// setFiles lists a set's files, refusing too many or badly named ones.
func setFiles(set string, names []string) ([]string, error) {
	if len(names) > MaxSetFiles {
		return nil, fmt.Errorf("%w: blob %s holds %d files, at most %d", ErrInvalid, set, len(names), MaxSetFiles)
	}
	for _, n := range names {
		if err := checkBlobName(n); err != nil {
			return nil, fmt.Errorf("%w: in blob %s: %v", ErrInvalid, set, err)
		}
	}
	sort.Strings(names)
	return names, nil
}

// sealLocal MACs the files of a set in the store, and flushes them to
// disk meanwhile.
func (w *Writer) sealLocal(set *fileSet) error {
	lt := w.tx.(localTxn)
	names, err := lt.listDir(set.name)
	if err == nil {
		names, err = setFiles(set.name, names)
	}
	if err != nil {
		return err
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, n := range names {
		f, err := lt.openFile(set.name, n)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	var wg sync.WaitGroup
	syncErrs := make([]error, len(files))
	// The disk writes while the MACs are computed.
	for i, f := range files {
		wg.Add(1)
		go func() { defer wg.Done(); syncErrs[i] = f.Sync() }()
	}
	for i, f := range files {
		st, err := f.Stat()
		if err != nil {
			wg.Wait()
			return unavailable("sealing blob "+set.name, err)
		}
		name := set.name + "/" + names[i]
		if w.m.Size+st.Size() > w.budget {
			wg.Wait()
			return fmt.Errorf("%w: the snapshot passed the owner's %d bytes with blob %s; nothing was kept", ErrLimit, w.s.o.MaxBytes, name)
		}
		mac, err := w.s.macAt(w.m.Owner, w.m.ID, name, f, st.Size())
		if err != nil {
			wg.Wait()
			return err
		}
		w.m.Blobs = append(w.m.Blobs, BlobInfo{Name: name, Size: st.Size(), MAC: hex.EncodeToString(mac), Chunk: fileChunk})
		w.m.Size += st.Size()
	}
	wg.Wait()
	if err := errors.Join(syncErrs...); err != nil {
		return unavailable("writing blob "+set.name, err)
	}
	return nil
}

// copySet streams the files of a set from its temporary directory into
// the backend, then removes the directory.
func (w *Writer) copySet(set *fileSet) error {
	defer os.RemoveAll(set.dir)
	entries, err := os.ReadDir(set.dir)
	if err != nil {
		return unavailable("sealing blob "+set.name, err)
	}
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return fmt.Errorf("%w: blob %s holds %s, not a regular file", ErrInvalid, set.name, quoteCap(e.Name()))
		}
		names = append(names, e.Name())
	}
	if names, err = setFiles(set.name, names); err != nil {
		return err
	}
	buf := make([]byte, copyBuf)
	for _, n := range names {
		name := set.name + "/" + n
		f, err := os.Open(filepath.Join(set.dir, n))
		if err != nil {
			return unavailable("sealing blob "+name, err)
		}
		out, err := w.tx.blob(w.ctx, name)
		if err != nil {
			f.Close()
			return err
		}
		mac := w.s.newChunkedMAC(w.m.Owner, w.m.ID, name)
		var size int64
		for err == nil {
			var k int
			k, err = f.Read(buf)
			if w.m.Size+size+int64(k) > w.budget {
				err = fmt.Errorf("%w: the snapshot passed the owner's %d bytes while streaming blob %s; nothing was kept", ErrLimit, w.s.o.MaxBytes, name)
				break
			}
			mac.Write(buf[:k])
			size += int64(k)
			if _, werr := out.Write(buf[:k]); werr != nil {
				err = werr
			}
		}
		f.Close()
		if cerr := out.Close(); err == io.EOF {
			err = cerr
		}
		if err != nil && err != io.EOF {
			return err
		}
		w.m.Blobs = append(w.m.Blobs, BlobInfo{Name: name, Size: size, MAC: hex.EncodeToString(mac.Sum()), Chunk: fileChunk})
		w.m.Size += size
	}
	return nil
}

// dropSets removes the temporary directories of sets not yet copied
// (an abort; a local set goes with its snapshot's directory).
func (w *Writer) dropSets() {
	for _, set := range w.sets {
		if !set.local {
			os.RemoveAll(set.dir)
		}
	}
	w.sets = nil
}

// FileSet is a verified file set, as a directory to read.
type FileSet struct {
	// Dir holds the set's files, and nothing else.
	Dir   string
	check func() error
	close func()
}

// Check tells, once the reader has read the files, that they were the
// verified ones all along: a file of the store's directory written or
// replaced since Get verified it is ErrTampered (the loaded state must be
// discarded then).
func (fs *FileSet) Check() error {
	if fs.check == nil {
		return nil
	}
	return fs.check()
}

// Close removes a temporary copy (nothing to do for the directory store).
func (fs *FileSet) Close() {
	if fs.close != nil {
		fs.close()
	}
}

// setBlobs are the sealed files of set name in m.
func setBlobs(m Manifest, name string) []BlobInfo {
	var out []BlobInfo
	for _, b := range m.Blobs {
		if set, _, ok := strings.Cut(b.Name, "/"); ok && set == name {
			out = append(out, b)
		}
	}
	return out
}

// Files gives the file set name of the snapshot as a directory: in place
// in the directory store (Get verified every file; the directory must
// hold those files and no other), copied into a temporary directory
// (dir, or the system's) through the MAC check otherwise.
func (sn *Snapshot) Files(name string, dir string) (*FileSet, error) {
	sn.mu.Lock()
	closed := sn.close
	sn.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: the snapshot is closed", ErrInvalid)
	}
	blobs := setBlobs(sn.m, name)
	if len(blobs) == 0 {
		return nil, fmt.Errorf("%w: snapshot %s has no file set %s", ErrNotFound, sn.m.ID, quoteCap(name))
	}
	if lv, ok := sn.v.(localView); ok {
		return sn.localFiles(lv, name, blobs)
	}
	tmp, err := tempDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: a directory for blob %s: %v", ErrUnavailable, name, err)
	}
	buf := make([]byte, copyBuf)
	for _, b := range blobs {
		_, file, _ := strings.Cut(b.Name, "/")
		err = sn.copyOut(b, filepath.Join(tmp, file), buf)
		if err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
	}
	return &FileSet{Dir: tmp, close: func() { os.RemoveAll(tmp) }}, nil
}

func (sn *Snapshot) copyOut(b BlobInfo, path string, buf []byte) error {
	r, err := sn.s.blobReader(sn.ctx, sn.v, sn.m, b)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return unavailable("copying blob "+b.Name, err)
	}
	_, err = io.CopyBuffer(f, onlyReader{r}, buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// localFiles is the set's directory in the store, once it holds exactly
// the sealed files.
func (sn *Snapshot) localFiles(lv localView, name string, blobs []BlobInfo) (*FileSet, error) {
	exact := func() error {
		names, err := lv.listDir(name)
		if err != nil {
			return unavailable("reading blob "+name, err)
		}
		if len(names) != len(blobs) {
			return fmt.Errorf("%w: blob %s holds %d files, %d were sealed", ErrTampered, name, len(names), len(blobs))
		}
		for _, b := range blobs {
			_, file, _ := strings.Cut(b.Name, "/")
			if err := lv.unchanged(name, file); err != nil {
				return err
			}
		}
		return nil
	}
	if err := exact(); err != nil {
		return nil, err
	}
	return &FileSet{Dir: lv.localDir(name), check: exact}, nil
}

// tempDir is a new directory under base (made 0700 if missing), or under
// the system's temporary directory.
func tempDir(base string) (string, error) {
	if base != "" {
		if err := os.MkdirAll(base, 0o700); err != nil {
			return "", err
		}
	}
	return os.MkdirTemp(base, "snapstore-files-")
}
