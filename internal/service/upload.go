package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/wsfs"
)

// An upload of several files (E2B's multipart POST /files) is all or
// nothing: each file streams to a temporary name beside its place, and
// Commit renames them all into place. If any file fails (the workspace is
// full, a bad path, a broken body), Close removes what the upload wrote
// and the directories it made: the workspace is left as it was, and files
// that were there before are never touched. What a caller would expect of
// a failed request, and the only answer that needs no list of what was
// written.

// uploadPrefix starts the temporary name of a file being uploaded.
const uploadPrefix = ".codecage-upload-"

// Upload writes files into a session's workspace, all or nothing. Add
// each file, then Commit; always Close. It holds a transfer slot
// (SANDBOX_MAX_TRANSFERS) until closed.
type Upload struct {
	s         *Service
	ctx       context.Context
	id, owner string
	start     time.Time
	buf       []byte
	files     []pendingFile
	failed    error
	committed bool
	closers   []func()

	// dirs are the directories the upload made, parents first.
	dirs []string
	// A session of this replica:
	root *wsfs.Root
	se   *session.Session
	// used counts the workspace's bytes when it is not a tmpfs of its own
	// (measured once, at the start, then what the upload adds).
	used int64

	// Or the replica holding the session, and the directories known to
	// be there.
	replica string
	known   map[string]bool
}

type pendingFile struct {
	tmp, final string // relative to the workspace (or as given, remote)
	given      string
	placed     bool
}

// BeginUpload starts an upload into a session's workspace.
func (s *Service) BeginUpload(ctx context.Context, id, owner string) (*Upload, error) {
	slot, err := s.acquireTransfer()
	if err != nil {
		return nil, err
	}
	u := &Upload{s: s, ctx: ctx, id: id, owner: owner, start: time.Now(), closers: []func(){slot}}
	if u.replica = s.remote(id); u.replica != "" {
		u.buf = make([]byte, peerChunk) // the owner checks the session at the first chunk
		return u, nil
	}
	release, err := s.admit(ctx, false)
	if err != nil {
		slot()
		return nil, err
	}
	u.closers = append(u.closers, release)
	r, se, _, err := s.root(id, owner, ".")
	if err != nil {
		u.Close()
		return nil, err
	}
	u.root, u.se, u.buf = r, se, make([]byte, TransferBuffer)
	u.closers = append(u.closers, func() { r.Close() })
	if _, _, _, quota := se.Workspace(); !quota {
		if u.used, err = r.Usage(ctx, usageDepth, usageEntries); ctx.Err() != nil {
			u.Close()
			return nil, ctx.Err()
		}
	}
	return u, nil
}

// Add streams body to the file p (parents created), under a temporary
// name until Commit. After a failure the upload can only be closed.
func (u *Upload) Add(p string, body io.Reader) error {
	if u.failed != nil || u.committed {
		return fmt.Errorf("%w: the upload has ended", ErrInvalidRequest)
	}
	var err error
	if u.replica != "" {
		err = u.addRemote(p, body)
	} else {
		err = u.addLocal(p, body)
	}
	u.failed = err
	return err
}

func (u *Upload) addLocal(p string, body io.Reader) error {
	rel, err := workspacePath(p, u.se.Home())
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("%w: %q is the workspace itself", ErrBadPath, p)
	}
	if e, err := u.root.Lstat(rel); err == nil {
		if e.Mode&fs.ModeSymlink != 0 {
			// Written through, as in a VM: the file lands where the link leads.
			if rel, err = u.root.Resolve(rel); err != nil {
				return fmt.Errorf("%w: %q is a symlink to nothing the file API can write", ErrBadPath, p)
			}
			if e, err = u.root.Lstat(rel); err != nil {
				return fileError(p, err)
			}
		}
		switch {
		case e.Mode.IsDir():
			return fmt.Errorf("%w: %q is a directory", ErrBadPath, p)
		case !e.Mode.IsRegular():
			return fmt.Errorf("%w: %q is not a regular file", ErrBadPath, p)
		}
	}
	uid := u.se.SandboxUID()
	dir := path.Dir(rel)
	if dir != "." {
		missing := u.missingDirs(dir)
		_, err := u.root.MkdirAll(dir, 0o755, uid)
		u.dirs = append(u.dirs, missing...)
		if err != nil {
			return fileError(p, err)
		}
	}
	f, tmp, err := u.root.CreateTemp(dir, uploadPrefix, 0o644)
	if err != nil {
		return fileError(p, err)
	}
	u.files = append(u.files, pendingFile{tmp: tmp, final: rel, given: p})
	limit := u.s.cfg.MaxFileSize
	w := &errWriter{w: f}
	n, cerr := io.CopyBuffer(w, io.LimitReader(body, limit+1), u.buf)
	if uid >= 0 {
		_ = f.Chown(uid, uid) // the code (another uid on the host) may change it later
	}
	if err := f.Close(); err != nil && w.err == nil {
		w.err = err
	}
	switch {
	case w.err != nil:
		if errors.Is(w.err, syscall.ENOSPC) || errors.Is(w.err, syscall.EDQUOT) || errors.Is(w.err, syscall.EFBIG) {
			return fmt.Errorf("%w: writing %q: the workspace is full (SANDBOX_WORKSPACE_SIZE %d bytes)", ErrTooLarge, p, u.s.cfg.WorkspaceMax)
		}
		return fmt.Errorf("%w: writing %q: %v", ErrTooLarge, p, w.err)
	case cerr != nil:
		return bodyError(p, cerr)
	case n > limit:
		return fmt.Errorf("%w: %q is over the file limit of %d bytes (SANDBOX_MAX_FILE_SIZE)", ErrTooLarge, p, limit)
	}
	if _, _, _, quota := u.se.Workspace(); !quota {
		if u.used += n; u.used > u.s.cfg.WorkspaceMax {
			return fmt.Errorf("%w: %q: the workspace would hold more than its limit of %d bytes (SANDBOX_WORKSPACE_SIZE)", ErrTooLarge, p, u.s.cfg.WorkspaceMax)
		}
	}
	return nil
}

// missingDirs lists dir and those of its parents that do not exist yet,
// parents first: what Close removes again if the upload fails.
func (u *Upload) missingDirs(dir string) []string {
	var missing []string
	for d := dir; d != "." && d != "/"; d = path.Dir(d) {
		if _, err := u.root.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	for i, j := 0, len(missing)-1; i < j; i, j = i+1, j-1 {
		missing[i], missing[j] = missing[j], missing[i]
	}
	return missing
}

// addRemote sends the file a chunk at a time to the replica holding the
// session: written under a temporary name beside its place, renamed by
// Commit.
func (u *Upload) addRemote(p string, body io.Reader) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	tmp := path.Join(path.Dir(p), uploadPrefix+hex.EncodeToString(b[:]))
	if err := u.remoteMissingDirs(path.Dir(p)); err != nil {
		return err
	}
	u.files = append(u.files, pendingFile{tmp: tmp, final: p, given: p})
	limit, total := u.s.cfg.MaxFileSize, int64(0)
	for first := true; ; first = false {
		n, rerr := io.ReadFull(body, u.buf)
		if n > 0 || first {
			if total += int64(n); total > limit {
				return fmt.Errorf("%w: %q is over the file limit of %d bytes (SANDBOX_MAX_FILE_SIZE)", ErrTooLarge, p, limit)
			}
			call := PeerCall{Op: OpWriteFile, Owner: u.owner, SessionID: u.id, Path: tmp, Data: u.buf[:n], Append: !first}
			if _, err := forward[*FileInfo](u.ctx, u.s, u.replica, call, nil, EventFile, "write"); err != nil {
				return err
			}
		}
		switch rerr {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return nil
		default:
			return bodyError(p, rerr)
		}
	}
}

// remoteMissingDirs notes which of dir and its parents the owner does not
// have yet (its first chunk's write makes them): a failed upload removes
// them again.
func (u *Upload) remoteMissingDirs(dir string) error {
	if u.known == nil {
		u.known = map[string]bool{}
	}
	var missing []string
	for d := dir; d != "." && d != "/" && !u.known[d]; d = path.Dir(d) {
		_, err := forward[*FileInfo](u.ctx, u.s, u.replica, PeerCall{Op: OpStatFile, Owner: u.owner, SessionID: u.id, Path: d}, nil, EventFile, "stat")
		if err == nil {
			break
		}
		if ErrorKind(err) != KindFileNotFound {
			return err
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		u.dirs = append(u.dirs, missing[i])
	}
	for d := dir; d != "." && d != "/" && !u.known[d]; d = path.Dir(d) {
		u.known[d] = true
	}
	return nil
}

// bodyError is a failure to read what the client sends.
func bodyError(p string, err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("%w: the upload is over its limit of %d bytes", ErrTooLarge, mbe.Limit)
	}
	return fmt.Errorf("%w: reading the upload of %q: %v", ErrInvalidRequest, p, err)
}

// Commit puts every file in place and describes them. A rename that
// fails (the code made a directory there meanwhile) leaves those before
// it in place: the error then names them.
func (u *Upload) Commit() ([]FileInfo, error) {
	if u.failed != nil || u.committed {
		return nil, fmt.Errorf("%w: the upload has ended", ErrInvalidRequest)
	}
	u.committed = true
	out := make([]FileInfo, 0, len(u.files))
	for i := range u.files {
		f := &u.files[i]
		fi, err := u.place(f)
		if err != nil {
			u.failed = err
			if i == 0 {
				return nil, err
			}
			return nil, fmt.Errorf("%w (%d of %d files were written before it: %s)", err, i, len(u.files), listPaths(u.files[:i]))
		}
		f.placed = true
		out = append(out, *fi)
	}
	for _, fi := range out {
		u.s.emit(u.ctx, Event{Kind: EventFile, Action: "write", Outcome: "success", Duration: time.Since(u.start),
			Detail: fmt.Sprintf("%s: %s (%d bytes, upload)", u.id, fi.Path, fi.Size)})
	}
	return out, nil
}

func (u *Upload) place(f *pendingFile) (*FileInfo, error) {
	if u.replica != "" {
		call := PeerCall{Op: OpMoveFile, Owner: u.owner, SessionID: u.id, Path: f.tmp, To: f.final}
		return forward[*FileInfo](u.ctx, u.s, u.replica, call, nil, EventFile, "write")
	}
	if err := u.root.Rename(f.tmp, f.final); err != nil {
		if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return nil, fmt.Errorf("%w: %q is a directory", ErrBadPath, f.given)
		}
		return nil, fileError(f.given, err)
	}
	return stat(u.root, u.se.Home(), f.final)
}

// listPaths names files for a message, within a bound.
func listPaths(files []pendingFile) string {
	var b strings.Builder
	for i, f := range files {
		if b.Len() > 2000 {
			fmt.Fprintf(&b, " and %d more", len(files)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", truncate(f.given, 200))
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Close ends the upload: unless it was committed, what it wrote is
// removed (temporary files, then the directories it made, if empty).
func (u *Upload) Close() {
	if u.failed != nil || !u.committed {
		u.rollback()
	}
	if u.failed != nil {
		u.s.emitFailure(u.ctx, EventFile, "write", "", "", u.failed, u.start)
	}
	for i := len(u.closers) - 1; i >= 0; i-- {
		u.closers[i]()
	}
	u.closers = nil
}

func (u *Upload) rollback() {
	if u.replica != "" {
		// The client may be gone: the clean-up is bounded, not canceled.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), 30*time.Second)
		defer cancel()
		for _, f := range u.files {
			if !f.placed {
				_, _ = forward[struct{}](ctx, u.s, u.replica, PeerCall{Op: OpDeleteFile, Owner: u.owner, SessionID: u.id, Path: f.tmp}, nil, EventFile, "delete")
			}
		}
		for i := len(u.dirs) - 1; i >= 0; i-- {
			_, _ = forward[struct{}](ctx, u.s, u.replica, PeerCall{Op: OpDeleteFile, Owner: u.owner, SessionID: u.id, Path: u.dirs[i], EmptyDir: true}, nil, EventFile, "delete")
		}
		u.files, u.dirs = nil, nil
		return
	}
	if u.root == nil {
		return
	}
	for _, f := range u.files {
		if !f.placed {
			_ = u.root.Remove(f.tmp)
		}
	}
	for i := len(u.dirs) - 1; i >= 0; i-- {
		_ = u.root.RemoveEmptyDir(u.dirs[i]) // the code may have put files there meanwhile: then it stays
	}
	u.files, u.dirs = nil, nil
}

// errWriter remembers a write's error, to tell it from a read's.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}
