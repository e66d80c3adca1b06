package service

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

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/wsfs"
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

// A listing is bounded whatever the code planted in the workspace: past
// any of these it stops and says it is truncated.
const (
	// MaxListedFiles bounds a listing's entries.
	MaxListedFiles = 10000
	// MaxListDepth bounds how deep a listing goes (and the depth a caller
	// may ask for); a listing of "all" the tree stops there.
	MaxListDepth = 64
	// MaxListBytes bounds the paths and symlink targets of a listing.
	MaxListBytes = 4 << 20
)

// A workspace that is not a tmpfs of its own (rootless) is measured by a
// walk, within these bounds: what lies beyond is not counted, as the
// kernel does not cap such a workspace anyway.
const (
	usageDepth   = 256
	usageEntries = 200000
)

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
	// Link is where a symlink leads, followed inside the workspace (nil
	// when it dangles, loops or leaves it): for surfaces that describe a
	// link by its target, as E2B's does.
	Link *LinkEnd `json:"-"`
	// Metadata is the file's user-defined metadata (its user.e2b.*
	// extended attributes), within MaxMetadataKeys and MaxMetadataBytes.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// FileList is a listing of a workspace directory.
type FileList struct {
	Files []FileInfo `json:"files"`
	// Truncated: the listing stopped at one of its bounds (MaxListedFiles,
	// MaxListDepth, MaxListBytes); Files is only part of the tree.
	Truncated bool `json:"truncated"`
}

func fileInfo(e wsfs.Entry) FileInfo {
	return FileInfo{Path: e.Path, Size: e.Size, Dir: e.Mode.IsDir(), Symlink: e.Mode&fs.ModeSymlink != 0,
		Modified: e.ModTime, Mode: uint32(e.Mode.Perm()), Target: e.Target}
}

// workspacePath turns what a caller gives ("data.csv", "/workspace/a/b",
// or under the session's home, "/home/user/a") into a clean path relative
// to the workspace, or ErrBadPath. Symlinks are not this function's
// concern: wsfs refuses any that leads out.
func workspacePath(p, home string) (string, error) {
	if p == "" || len(p) > 4096 || strings.ContainsRune(p, 0) || !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: %s", ErrBadPath, Quote(p))
	}
	if strings.HasPrefix(p, "/") {
		p = path.Clean(p)
		rel, ok := strings.CutPrefix(p, home)
		if !ok {
			rel, ok = strings.CutPrefix(p, fleet.WorkspaceDir)
		}
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
			return "", fmt.Errorf("%w: %s is outside the workspace (%s)", ErrBadPath, Quote(p), home)
		}
		p = strings.TrimPrefix(rel, "/")
		if p == "" {
			p = "."
		}
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%w: %s leaves the workspace", ErrBadPath, Quote(p))
	}
	return clean, nil
}

func fileError(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %q", ErrFileNotFound, p)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, syscall.EXDEV), errors.Is(err, fs.ErrInvalid):
		return fmt.Errorf("%w: %q leads outside the workspace", ErrBadPath, p)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: %q passes through a symlink the file API does not follow here", ErrBadPath, p)
	case errors.Is(err, wsfs.ErrNotDir), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %q is not a directory", ErrBadPath, p)
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("%w: %q: %v", ErrPermission, p, err)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%w: %q is too long", ErrBadPath, p)
	}
	return fmt.Errorf("%w: %q: %v", ErrBadPath, p, err)
}

// metadataError is a failure to store a file's metadata.
func metadataError(p string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.E2BIG) {
		return fmt.Errorf("%w: no room for the metadata of %q: %v", ErrTooLarge, p, err)
	}
	return fmt.Errorf("%w: the metadata of %q: %v", ErrInvalidRequest, p, err)
}

// WriteFile writes data to path in a session's filesystem (its
// workspace, or its /tmp), creating parent directories, within the
// file-size and workspace limits.
func (s *Service) WriteFile(ctx context.Context, id, owner, p string, data []byte) (*FileInfo, error) {
	return s.WriteFileWith(ctx, id, owner, p, data, nil)
}

// WriteFileWith is WriteFile that stores md as the file's metadata
// (replacing what it had; CheckMetadata's rules).
func (s *Service) WriteFileWith(ctx context.Context, id, owner, p string, data []byte, md map[string]string) (*FileInfo, error) {
	return do(ctx, s, OpWriteFile, call[*FileInfo]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Path: p, Data: data, Metadata: md},
		run: func(ctx context.Context) (*FileInfo, error) { return s.writeFile(ctx, id, owner, p, data, md) },
		success: func(fi *FileInfo, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "write", Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s: %s (%d bytes)", id, fi.Path, len(data))}
		},
	})
}

func (s *Service) writeFile(ctx context.Context, id, owner, p string, data []byte, md map[string]string) (*FileInfo, error) {
	if int64(len(data)) > s.cfg.MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes is over the file limit of %d (SANDBOX_MAX_FILE_SIZE)", ErrTooLarge, len(data), s.cfg.MaxFileSize)
	}
	md, err := CheckMetadata(md)
	if err != nil {
		return nil, err
	}
	o, err := s.open(id, owner, p, true, true)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	if o.rel == "." {
		return nil, fmt.Errorf("%w: %q is a directory", ErrBadPath, p)
	}
	if o.m.workspace {
		if err := s.checkRoom(ctx, o.r, o.se, int64(len(data))); err != nil {
			return nil, err
		}
	}
	r, rel := o.r, o.rel
	uid := o.se.SandboxUID()
	if dir := path.Dir(rel); dir != "." && !o.throughLast {
		if _, err := r.MkdirAll(dir, 0o755, uid); err != nil {
			return nil, fileError(p, err)
		}
	}
	// O_NONBLOCK: a FIFO the code planted must not hang the server.
	f, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0o644)
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
	if uid >= 0 {
		// The code (another uid on the host) may change it later.
		_ = f.Chown(uid, uid)
	}
	// A write replaces the file's metadata (none given: none kept), as
	// envd's does.
	merr := wsfs.SetMetadataFD(int(f.Fd()), md)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return nil, fmt.Errorf("%w: writing %q: %v", ErrTooLarge, p, err)
	}
	if merr != nil {
		return nil, metadataError(p, merr)
	}
	return o.describe(rel)
}

// checkRoom refuses n more bytes the workspace has no room for. A tmpfs
// of its own answers at once (the kernel keeps its quota); a plain
// directory is walked, within bounds.
func (s *Service) checkRoom(ctx context.Context, r *wsfs.Root, se *session.Session, n int64) error {
	if _, _, _, quota := se.Workspace(); quota {
		used, free, err := r.Space()
		if err == nil && n > free {
			return fmt.Errorf("%w: the workspace holds %d bytes; %d more exceed its limit of %d (SANDBOX_WORKSPACE_SIZE)", ErrTooLarge, used, n, s.cfg.WorkspaceMax)
		}
		return nil
	}
	used, err := r.Usage(ctx, usageDepth, usageEntries)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil && used+n > s.cfg.WorkspaceMax {
		return fmt.Errorf("%w: the workspace holds %d bytes; %d more exceed its limit of %d (SANDBOX_WORKSPACE_SIZE)", ErrTooLarge, used, n, s.cfg.WorkspaceMax)
	}
	return nil
}

// appendFile adds data to the end of an existing file (a later chunk of
// an upload forwarded from another replica), within the file-size and
// workspace limits.
func (s *Service) appendFile(ctx context.Context, id, owner, p string, data []byte) (*FileInfo, error) {
	o, err := s.open(id, owner, p, true, true)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	if o.rel == "." {
		return nil, fmt.Errorf("%w: %q is a directory", ErrBadPath, p)
	}
	f, err := o.r.OpenFile(o.rel, os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fileError(p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %q is not a regular file", ErrBadPath, p)
	}
	if fi.Size()+int64(len(data)) > s.cfg.MaxFileSize {
		return nil, fmt.Errorf("%w: %q would be over the file limit of %d (SANDBOX_MAX_FILE_SIZE)", ErrTooLarge, p, s.cfg.MaxFileSize)
	}
	if o.m.workspace {
		if err := s.checkRoom(ctx, o.r, o.se, int64(len(data))); err != nil {
			return nil, err
		}
	}
	if _, err := f.Write(data); err != nil {
		return nil, fmt.Errorf("%w: writing %q: %v", ErrTooLarge, p, err)
	}
	return o.describe(o.rel)
}

// ReadFile returns the contents of path in a session's workspace, whole
// (up to SANDBOX_MAX_FILE_SIZE); it holds a transfer slot while it reads.
// Downloads use OpenFile, which streams.
func (s *Service) ReadFile(ctx context.Context, id, owner, p string) ([]byte, error) {
	slot, err := s.acquireTransfer()
	if err != nil {
		return nil, err
	}
	defer slot()
	return do(ctx, s, OpReadFile, call[[]byte]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Path: p},
		run: func(context.Context) ([]byte, error) { return s.readFile(id, owner, p) },
	})
}

func (s *Service) readFile(id, owner, p string) ([]byte, error) {
	o, err := s.open(id, owner, p, true, false)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	if o.r == nil {
		return nil, fmt.Errorf("%w: %q is not a regular file", ErrBadPath, p)
	}
	f, err := o.r.OpenFile(o.rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0) // a planted FIFO must not hang us
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

// ListFiles lists the workspace below path ("" or "." for all of it, as
// deep as MaxListDepth).
func (s *Service) ListFiles(ctx context.Context, id, owner, p string) (*FileList, error) {
	return s.ListDir(ctx, id, owner, p, 0)
}

// listDir lists below p, depth levels deep (0: all, up to MaxListDepth),
// within the listing's bounds; it stops when ctx ends.
func (s *Service) listDir(ctx context.Context, id, owner, p string, depth int) (*FileList, error) {
	if p == "" {
		p = "."
	}
	o, err := s.open(id, owner, p, true, false)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return o.list(ctx, depth)
}

// DeleteFile removes a file or a directory tree from the workspace.
func (s *Service) DeleteFile(ctx context.Context, id, owner, p string) error {
	_, err := do(ctx, s, OpDeleteFile, call[struct{}]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Path: p},
		run: func(ctx context.Context) (struct{}, error) { return struct{}{}, s.deleteFile(ctx, id, owner, p) },
		success: func(_ struct{}, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "delete", Outcome: "success", Duration: took, Detail: id + ": " + p}
		},
	})
	return err
}

func (s *Service) deleteFile(ctx context.Context, id, owner, p string) error {
	o, err := s.open(id, owner, p, false, true)
	if err != nil {
		return err
	}
	defer o.Close()
	if o.rel == "." {
		return fmt.Errorf("%w: %s itself cannot be deleted", ErrBadPath, o.m.at)
	}
	return fileError(p, o.r.RemoveAll(ctx, o.rel))
}

// removeEmptyDir removes a directory of the workspace if it is empty.
func (s *Service) removeEmptyDir(id, owner, p string) error {
	o, err := s.open(id, owner, p, false, true)
	if err != nil {
		return err
	}
	defer o.Close()
	if o.rel == "." {
		return fmt.Errorf("%w: %s itself cannot be deleted", ErrBadPath, o.m.at)
	}
	return fileError(p, o.r.RemoveEmptyDir(o.rel))
}
