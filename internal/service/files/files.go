// Package files is the service's file domain: what the file API does in
// a session's filesystem as its code sees it (view.go): read, write, list,
// stat, mkdir, move and delete, downloads, all-or-nothing uploads,
// directory watches and files' metadata. It is plain logic over a session
// the service has already found: no admission, audit or forwarding. The
// service's root wraps each call in its envelope, and reaches a session
// of another replica through what this package declares for it (Remote,
// NewChunkedDownload).
package files

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

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/service/event"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/wsfs"
)

// Limits are the operator's bounds the file API keeps.
type Limits struct {
	MaxFileSize  int64 // SANDBOX_MAX_FILE_SIZE
	WorkspaceMax int64 // SANDBOX_WORKSPACE_SIZE
	TmpSize      int64 // SANDBOX_TMP_SIZE, named when /tmp is full
	// MaxTransfers bounds the downloads and uploads in progress
	// (SANDBOX_MAX_TRANSFERS; at least 1).
	MaxTransfers int
	// Directory watches: SANDBOX_MAX_WATCHES, SANDBOX_SESSION_MAX_WATCHES,
	// SANDBOX_KEY_MAX_WATCHES and SANDBOX_WATCH_MAX_DIRS.
	MaxWatches, SessionMaxWatches, KeyMaxWatches, WatchMaxDirs int
}

// Options are what the file domain is given.
type Options struct {
	// Sessions is the table whose sessions' watches it starts, so that a
	// session that closes, pauses or is parked ends them.
	Sessions *session.Table
	Limits   Limits
	// Emit reports an upload's events: an upload outlives the envelope
	// of the call that began it. nil: none.
	Emit func(context.Context, event.Event)
}

// Files is the file API over the sessions of one replica. It is safe for
// concurrent use.
type Files struct {
	sessions *session.Table
	lim      Limits
	emit     func(context.Context, event.Event)
	// transfers holds a token per download or upload in progress.
	transfers chan struct{}
	// watches are the directory watches open (watch.go).
	watches watchSet
}

// New returns the file domain.
func New(o Options) *Files {
	if o.Emit == nil {
		o.Emit = func(context.Context, event.Event) {}
	}
	return &Files{sessions: o.Sessions, lim: o.Limits, emit: o.Emit, transfers: make(chan struct{}, max(o.Limits.MaxTransfers, 1))}
}

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

// WorkspacePath turns what a caller gives ("data.csv", "/workspace/a/b",
// or under the session's home, "/home/user/a") into a clean path relative
// to the workspace, or errdefs.ErrBadPath. Symlinks are not this function's
// concern: wsfs refuses any that leads out.
func WorkspacePath(p, home string) (string, error) {
	if p == "" || len(p) > 4096 || strings.ContainsRune(p, 0) || !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: %s", errdefs.ErrBadPath, bounded.Quote(p))
	}
	if strings.HasPrefix(p, "/") {
		p = path.Clean(p)
		rel, ok := strings.CutPrefix(p, home)
		if !ok {
			rel, ok = strings.CutPrefix(p, fleet.WorkspaceDir)
		}
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
			return "", fmt.Errorf("%w: %s is outside the workspace (%s)", errdefs.ErrBadPath, bounded.Quote(p), home)
		}
		p = strings.TrimPrefix(rel, "/")
		if p == "" {
			p = "."
		}
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%w: %s leaves the workspace", errdefs.ErrBadPath, bounded.Quote(p))
	}
	return clean, nil
}

func fileError(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %q", errdefs.ErrFileNotFound, p)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, syscall.EXDEV), errors.Is(err, fs.ErrInvalid):
		return fmt.Errorf("%w: %q leads outside the workspace", errdefs.ErrBadPath, p)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: %q passes through a symlink the file API does not follow here", errdefs.ErrBadPath, p)
	case errors.Is(err, wsfs.ErrNotDir), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %q is not a directory", errdefs.ErrBadPath, p)
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("%w: %q: %v", errdefs.ErrPermission, p, err)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%w: %q is too long", errdefs.ErrBadPath, p)
	}
	return fmt.Errorf("%w: %q: %v", errdefs.ErrBadPath, p, err)
}

// metadataError is a failure to store a file's metadata.
func metadataError(p string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.E2BIG) {
		return fmt.Errorf("%w: no room for the metadata of %q: %v", errdefs.ErrTooLarge, p, err)
	}
	return fmt.Errorf("%w: the metadata of %q: %v", errdefs.ErrInvalidRequest, p, err)
}

// CheckWrite refuses a write of data and md at once, before its session
// is looked for: too large, or metadata CheckMetadata refuses.
func (f *Files) CheckWrite(data []byte, md map[string]string) error {
	_, err := f.checkWrite(data, md)
	return err
}

// checkWrite is CheckWrite that returns md as it is stored.
func (f *Files) checkWrite(data []byte, md map[string]string) (map[string]string, error) {
	if int64(len(data)) > f.lim.MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes is over the file limit of %d (SANDBOX_MAX_FILE_SIZE)", errdefs.ErrTooLarge, len(data), f.lim.MaxFileSize)
	}
	return CheckMetadata(md)
}

// Write writes data to path p in se's filesystem (its workspace, or its
// /tmp), creating parent directories, within the file-size and workspace
// limits, and stores md as the file's metadata (replacing what it had;
// CheckMetadata's rules).
func (f *Files) Write(ctx context.Context, se *session.Session, p string, data []byte, md map[string]string) (*FileInfo, error) {
	md, err := f.checkWrite(data, md)
	if err != nil {
		return nil, err
	}
	o, err := open(se, p, true, true)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	if o.rel == "." {
		return nil, fmt.Errorf("%w: %q is a directory", errdefs.ErrBadPath, p)
	}
	if o.m.workspace {
		if err := f.checkRoom(ctx, o.r, o.se, int64(len(data))); err != nil {
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
	file, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0o644)
	if err != nil {
		return nil, fileError(p, err)
	}
	if fi, err := file.Stat(); err != nil || !fi.Mode().IsRegular() {
		file.Close()
		return nil, fmt.Errorf("%w: %q is not a regular file", errdefs.ErrBadPath, p)
	}
	if err := file.Truncate(0); err != nil {
		file.Close()
		return nil, fileError(p, err)
	}
	_, werr := file.Write(data)
	if uid >= 0 {
		// The code (another uid on the host) may change it later.
		_ = file.Chown(uid, uid)
	}
	// A write replaces the file's metadata (none given: none kept), as
	// envd's does.
	merr := wsfs.SetMetadataFD(int(file.Fd()), md)
	cerr := file.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return nil, fmt.Errorf("%w: writing %q: %v", errdefs.ErrTooLarge, p, err)
	}
	if merr != nil {
		return nil, metadataError(p, merr)
	}
	return o.describe(rel)
}

// checkRoom refuses n more bytes the workspace has no room for. A tmpfs
// of its own answers at once (the kernel keeps its quota); a plain
// directory is walked, within bounds.
func (f *Files) checkRoom(ctx context.Context, r *wsfs.Root, se *session.Session, n int64) error {
	if _, _, _, quota := se.Workspace(); quota {
		used, free, err := r.Space()
		if err == nil && n > free {
			return fmt.Errorf("%w: the workspace holds %d bytes; %d more exceed its limit of %d (SANDBOX_WORKSPACE_SIZE)", errdefs.ErrTooLarge, used, n, f.lim.WorkspaceMax)
		}
		return nil
	}
	used, err := r.Usage(ctx, usageDepth, usageEntries)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil && used+n > f.lim.WorkspaceMax {
		return fmt.Errorf("%w: the workspace holds %d bytes; %d more exceed its limit of %d (SANDBOX_WORKSPACE_SIZE)", errdefs.ErrTooLarge, used, n, f.lim.WorkspaceMax)
	}
	return nil
}

// Append adds data to the end of an existing file (a later chunk of an
// upload forwarded from another replica), within the file-size and
// workspace limits.
func (f *Files) Append(ctx context.Context, se *session.Session, p string, data []byte) (*FileInfo, error) {
	o, err := open(se, p, true, true)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	if o.rel == "." {
		return nil, fmt.Errorf("%w: %q is a directory", errdefs.ErrBadPath, p)
	}
	file, err := o.r.OpenFile(o.rel, os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fileError(p, err)
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %q is not a regular file", errdefs.ErrBadPath, p)
	}
	if fi.Size()+int64(len(data)) > f.lim.MaxFileSize {
		return nil, fmt.Errorf("%w: %q would be over the file limit of %d (SANDBOX_MAX_FILE_SIZE)", errdefs.ErrTooLarge, p, f.lim.MaxFileSize)
	}
	if o.m.workspace {
		if err := f.checkRoom(ctx, o.r, o.se, int64(len(data))); err != nil {
			return nil, err
		}
	}
	if _, err := file.Write(data); err != nil {
		return nil, fmt.Errorf("%w: writing %q: %v", errdefs.ErrTooLarge, p, err)
	}
	return o.describe(o.rel)
}

// Read returns the contents of path p in se's filesystem, whole (up to
// SANDBOX_MAX_FILE_SIZE). Downloads use OpenRead, which streams.
func (f *Files) Read(se *session.Session, p string) ([]byte, error) {
	o, err := open(se, p, true, false)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	if o.r == nil {
		return nil, fmt.Errorf("%w: %q is not a regular file", errdefs.ErrBadPath, p)
	}
	file, err := o.r.OpenFile(o.rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0) // a planted FIFO must not hang us
	if err != nil {
		return nil, fileError(p, err)
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return nil, fileError(p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %q is not a regular file", errdefs.ErrBadPath, p)
	}
	if fi.Size() > f.lim.MaxFileSize {
		return nil, fmt.Errorf("%w: %q is %d bytes, over the read limit of %d", errdefs.ErrTooLarge, p, fi.Size(), f.lim.MaxFileSize)
	}
	return io.ReadAll(io.LimitReader(file, f.lim.MaxFileSize+1))
}

// CheckDepth refuses a listing's depth out of 0 (all) to MaxListDepth.
func CheckDepth(depth int) error {
	if depth < 0 || depth > MaxListDepth {
		return fmt.Errorf("%w: depth %d is not between 0 (all) and %d", errdefs.ErrInvalidRequest, depth, MaxListDepth)
	}
	return nil
}

// List lists below p in se's filesystem ("" or "." for all the
// workspace), depth levels deep (1: its entries only; 0: all of the tree,
// up to MaxListDepth), within MaxListedFiles and MaxListBytes:
// FileList.Truncated says when it stopped at one of them. It stops when
// ctx ends.
func (f *Files) List(ctx context.Context, se *session.Session, p string, depth int) (*FileList, error) {
	if p == "" {
		p = "."
	}
	o, err := open(se, p, true, false)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return o.list(ctx, depth)
}

// Delete removes a file or a directory tree from se's filesystem.
func (f *Files) Delete(ctx context.Context, se *session.Session, p string) error {
	o, err := open(se, p, false, true)
	if err != nil {
		return err
	}
	defer o.Close()
	if o.rel == "." {
		return fmt.Errorf("%w: %s itself cannot be deleted", errdefs.ErrBadPath, o.m.at)
	}
	return fileError(p, o.r.RemoveAll(ctx, o.rel))
}

// RemoveEmptyDir removes a directory of se's filesystem if it is empty.
func (f *Files) RemoveEmptyDir(se *session.Session, p string) error {
	o, err := open(se, p, false, true)
	if err != nil {
		return err
	}
	defer o.Close()
	if o.rel == "." {
		return fmt.Errorf("%w: %s itself cannot be deleted", errdefs.ErrBadPath, o.m.at)
	}
	return fileError(p, o.r.RemoveEmptyDir(o.rel))
}

// WorkspaceUsed is how many bytes se's workspace holds: its tmpfs's own
// count, or a bounded walk of a plain directory.
func (f *Files) WorkspaceUsed(ctx context.Context, se *session.Session) (int64, error) {
	o, err := open(se, ".", true, false) // relative: the workspace
	if err != nil {
		return 0, err
	}
	defer o.Close()
	r := o.r
	if r == nil {
		return 0, fmt.Errorf("%w: the workspace is not a directory", errdefs.ErrUnavailable)
	}
	if _, _, _, quota := o.se.Workspace(); quota {
		used, _, err := r.Space()
		if err != nil {
			return 0, fmt.Errorf("%w: workspace: %v", errdefs.ErrUnavailable, err)
		}
		return used, nil
	}
	used, err := r.Usage(ctx, usageDepth, usageEntries)
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("%w: workspace: %v", errdefs.ErrUnavailable, err)
	}
	return used, nil
}
