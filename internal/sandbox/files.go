package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/jail"
)

// File API errors.
var (
	// ErrBadPath: a path that is absolute outside /workspace, leaves the
	// workspace, or is not a clean name.
	ErrBadPath = errors.New("bad path")
	// ErrFileNotFound: no such file in the workspace.
	ErrFileNotFound = errors.New("file not found")
	// ErrTooLarge: a file or the workspace would exceed its size limit.
	ErrTooLarge = errors.New("too large")
)

// MaxListedFiles bounds a listing.
const MaxListedFiles = 10000

// FileInfo describes one entry of a workspace.
type FileInfo struct {
	Path     string    `json:"path"`
	Size     int64     `json:"size"`
	Dir      bool      `json:"dir,omitempty"`
	Symlink  bool      `json:"symlink,omitempty"`
	Modified time.Time `json:"modified"`
	// Mode is the entry's permission bits (0o644: 420).
	Mode uint32 `json:"mode"`
	// Target is where a symlink points.
	Target string `json:"target,omitempty"`
}

// fileInfo describes the entry rel of r, whose Lstat is fi.
func fileInfo(r *os.Root, rel string, fi fs.FileInfo) FileInfo {
	out := FileInfo{Path: rel, Size: fi.Size(), Dir: fi.IsDir(), Symlink: fi.Mode()&fs.ModeSymlink != 0, Modified: fi.ModTime().UTC(), Mode: uint32(fi.Mode().Perm())}
	if out.Symlink {
		out.Target, _ = r.Readlink(rel)
	}
	return out
}

// workspacePath turns what a caller gives ("data.csv", "/workspace/a/b",
// or under the session's home, "/home/user/a") into a clean path relative
// to the workspace, or ErrBadPath. Symlinks are not this function's
// concern: os.Root refuses any that leads out.
func workspacePath(p, home string) (string, error) {
	if p == "" || len(p) > 4096 || strings.ContainsRune(p, 0) || !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: %q", ErrBadPath, p)
	}
	if strings.HasPrefix(p, "/") {
		p = path.Clean(p)
		rel, ok := strings.CutPrefix(p, home)
		if !ok {
			rel, ok = strings.CutPrefix(p, jail.WorkspaceDir)
		}
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
			return "", fmt.Errorf("%w: %q is outside the workspace (%s)", ErrBadPath, p, home)
		}
		p = strings.TrimPrefix(rel, "/")
		if p == "" {
			p = "."
		}
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%w: %q leaves the workspace", ErrBadPath, p)
	}
	return clean, nil
}

// root opens the session's workspace for the file API. os.Root resolves
// every path beneath it and refuses symlinks (and "..") that lead out, so a
// link the code plants never takes the server outside.
// It returns p relative to the workspace, too.
func (s *Service) root(id, owner, p string) (*os.Root, *session, string, error) {
	se, err := s.session(id, owner)
	if err != nil {
		return nil, nil, "", err
	}
	rel, err := workspacePath(p, homeOf(se))
	if err != nil {
		return nil, nil, "", err
	}
	r, err := os.OpenRoot(se.dir)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: workspace: %v", ErrUnavailable, err)
	}
	return r, se, rel, nil
}

// homeOf is where se's workspace is in its sandbox.
func homeOf(se *session) string { return jail.HomeOf(se.req.Home) }

func fileError(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %q", ErrFileNotFound, p)
	case errors.Is(err, fs.ErrInvalid), strings.Contains(err.Error(), "escapes"), strings.Contains(err.Error(), "path escapes from parent"):
		return fmt.Errorf("%w: %q leads outside the workspace", ErrBadPath, p)
	}
	return fmt.Errorf("%w: %q: %v", ErrBadPath, p, err)
}

// WriteFile writes data to path in a session's workspace, creating parent
// directories, within the file-size and workspace limits.
func (s *Service) WriteFile(ctx context.Context, id, owner, p string, data []byte) (*FileInfo, error) {
	if r := s.remote(id); r != "" {
		return forward[*FileInfo](ctx, s, r, PeerCall{Op: OpWriteFile, Owner: owner, SessionID: id, Path: p, Data: data}, nil, EventFile, "write")
	}
	start := time.Now()
	release, err := s.admit(ctx, false)
	if err != nil {
		s.emitFailure(ctx, EventFile, "write", "", "", err, start)
		return nil, err
	}
	defer release()
	fi, err := s.writeFile(id, owner, p, data)
	if err != nil {
		s.emitFailure(ctx, EventFile, "write", "", "", err, start)
		return nil, err
	}
	s.emit(ctx, Event{Kind: EventFile, Action: "write", Outcome: "success", Duration: time.Since(start),
		Detail: fmt.Sprintf("%s: %s (%d bytes)", id, fi.Path, len(data))})
	return fi, nil
}

func (s *Service) writeFile(id, owner, p string, data []byte) (*FileInfo, error) {
	if int64(len(data)) > s.cfg.MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes is over the file limit of %d (SANDBOX_MAX_FILE_SIZE)", ErrTooLarge, len(data), s.cfg.MaxFileSize)
	}
	r, se, rel, err := s.root(id, owner, p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	used, _ := usage(r)
	if used+int64(len(data)) > s.cfg.WorkspaceMax {
		return nil, fmt.Errorf("%w: the workspace holds %d bytes; %d more exceed its limit of %d (SANDBOX_WORKSPACE_SIZE)", ErrTooLarge, used, len(data), s.cfg.WorkspaceMax)
	}
	if dir := path.Dir(rel); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return nil, fileError(p, err)
		}
		chownTree(r, dir, se)
	}
	// O_NONBLOCK: a FIFO the code planted must not hang the server.
	f, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return nil, fileError(p, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %q is not a regular file", ErrBadPath, p)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fileError(p, err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return nil, fmt.Errorf("%w: writing %q: %v", ErrTooLarge, p, err)
	}
	if lease := se.sandbox(); lease != nil {
		// The code (another uid on the host) may change it later.
		_ = r.Lchown(rel, lease.HostUID(), lease.HostUID())
	}
	return stat(r, rel)
}

// chownTree gives the directories of rel to the sandbox's uid.
func chownTree(r *os.Root, rel string, se *session) {
	lease := se.sandbox()
	if lease == nil {
		return
	}
	uid := lease.HostUID()
	for d := rel; d != "." && d != "/"; d = path.Dir(d) {
		_ = r.Lchown(d, uid, uid)
	}
}

// ReadFile returns the contents of path in a session's workspace.
func (s *Service) ReadFile(ctx context.Context, id, owner, p string) ([]byte, error) {
	if r := s.remote(id); r != "" {
		return forward[[]byte](ctx, s, r, PeerCall{Op: OpReadFile, Owner: owner, SessionID: id, Path: p}, nil, EventFile, "read")
	}
	release, err := s.admit(ctx, false)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.readFile(id, owner, p)
}

func (s *Service) readFile(id, owner, p string) ([]byte, error) {
	r, _, rel, err := s.root(id, owner, p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a planted FIFO must not hang us
	if err != nil {
		return nil, fileError(p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileError(p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %q is not a regular file", ErrBadPath, p)
	}
	if fi.Size() > s.cfg.MaxFileSize {
		return nil, fmt.Errorf("%w: %q is %d bytes, over the read limit of %d", ErrTooLarge, p, fi.Size(), s.cfg.MaxFileSize)
	}
	return io.ReadAll(io.LimitReader(f, s.cfg.MaxFileSize+1))
}

// ListFiles lists the workspace below path ("" or "." for all of it).
func (s *Service) ListFiles(ctx context.Context, id, owner, p string) ([]FileInfo, error) {
	if r := s.remote(id); r != "" {
		return forward[[]FileInfo](ctx, s, r, PeerCall{Op: OpListFiles, Owner: owner, SessionID: id, Path: p}, nil, EventFile, "list")
	}
	release, err := s.admit(ctx, false)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.listFiles(id, owner, p)
}

func (s *Service) listFiles(id, owner, p string) ([]FileInfo, error) {
	return s.listDir(id, owner, p, 0)
}

// listDir lists below p, depth levels deep (0: all).
func (s *Service) listDir(id, owner, p string, depth int) ([]FileInfo, error) {
	if p == "" {
		p = "."
	}
	r, _, rel, err := s.root(id, owner, p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := []FileInfo{}
	err = fs.WalkDir(r.FS(), rel, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name == "." || name == rel && d.IsDir() {
			return nil
		}
		if depth > 0 && levels(rel, name) > depth {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if len(out) >= MaxListedFiles {
			return fs.SkipAll
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		out = append(out, fileInfo(r, name, fi))
		return nil
	})
	if err != nil {
		return nil, fileError(p, err)
	}
	return out, nil
}

// DeleteFile removes a file or a directory tree from the workspace.
func (s *Service) DeleteFile(ctx context.Context, id, owner, p string) error {
	if r := s.remote(id); r != "" {
		_, err := forward[struct{}](ctx, s, r, PeerCall{Op: OpDeleteFile, Owner: owner, SessionID: id, Path: p}, nil, EventFile, "delete")
		return err
	}
	start := time.Now()
	release, err := s.admit(ctx, false)
	if err == nil {
		defer release()
		if err = s.deleteFile(id, owner, p); err == nil {
			s.emit(ctx, Event{Kind: EventFile, Action: "delete", Outcome: "success", Duration: time.Since(start), Detail: id + ": " + p})
			return nil
		}
	}
	s.emitFailure(ctx, EventFile, "delete", "", "", err, start)
	return err
}

func (s *Service) deleteFile(id, owner, p string) error {
	r, _, rel, err := s.root(id, owner, p)
	if err != nil {
		return err
	}
	defer r.Close()
	if rel == "." {
		return fmt.Errorf("%w: the workspace itself cannot be deleted", ErrBadPath)
	}
	if _, err := r.Lstat(rel); err != nil {
		return fileError(p, err)
	}
	return fileError(p, r.RemoveAll(rel))
}

func stat(r *os.Root, rel string) (*FileInfo, error) {
	fi, err := r.Lstat(rel)
	if err != nil {
		return nil, fileError(rel, err)
	}
	info := fileInfo(r, rel, fi)
	return &info, nil
}

// levels is how many levels below dir name is (dir/a: 1, dir/a/b: 2).
func levels(dir, name string) int {
	if dir != "." {
		name = strings.TrimPrefix(name, dir+"/")
	}
	return strings.Count(name, "/") + 1
}

// usage sums the sizes of the workspace's files.
func usage(r *os.Root) (int64, error) {
	var n int64
	err := fs.WalkDir(r.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n, err
}
