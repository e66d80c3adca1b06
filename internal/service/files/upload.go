package files

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/service/event"
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

// uploadPrefix starts the temporary name of a file being uploaded. Then
// uploadNew or uploadReplaces says whether a file was at its place when the
// upload began: a watch reports the rename into place as the events envd's
// in-place write gives, which differ (see Watch.Take).
const (
	uploadPrefix   = ".codecage-upload-"
	uploadNew      = "n-"
	uploadReplaces = "r-"
)

// Upload writes files into a session's workspace, all or nothing. Add
// each file, then Commit; always Close. It holds a transfer slot
// (SANDBOX_MAX_TRANSFERS) until closed.
type Upload struct {
	f         *Files
	ctx       context.Context
	id        string
	start     time.Time
	buf       []byte
	files     []pendingFile
	failed    error
	committed bool
	closers   []func()

	// dirs are the directories the upload made, parents first (their
	// paths on the replica holding the session, remote).
	dirs []madeDir
	// meta is every file's metadata (SetMetadata).
	meta map[string]string
	// A session of this replica: its filesystem, and the mounts the
	// upload has opened (by their path in the sandbox).
	v     *view
	roots map[string]*wsfs.Root
	se    *session.Session
	// used counts the workspace's bytes when it is not a tmpfs of its own
	// (measured once, at the start, then what the upload adds).
	used int64

	// Or the replica holding the session, and the directories known to
	// be there.
	remote Remote
	known  map[string]bool
}

// Remote is the replica that holds an upload's session, as the service
// reaches it: each method is one call it forwards there, served by the
// file operation of the same name.
type Remote interface {
	// Write writes data to p, with md as its metadata; or, when more, adds
	// data to the end of p (a later chunk: md is nil).
	Write(ctx context.Context, p string, data []byte, md map[string]string, more bool) error
	// Stat fails with ErrFileNotFound when p is not there.
	Stat(ctx context.Context, p string) error
	Move(ctx context.Context, from, to string) (*FileInfo, error)
	// Delete removes p: a tree, or only an empty directory when emptyDir.
	Delete(ctx context.Context, p string, emptyDir bool) error
}

type pendingFile struct {
	r          *wsfs.Root // its mount (nil: remote)
	m          *mount
	tmp, final string // relative to its mount (or as given, remote)
	given      string
	placed     bool
}

// madeDir is a directory an upload made: relative to r (or remote).
type madeDir struct {
	r   *wsfs.Root
	rel string
}

// BeginUpload starts an upload into se's filesystem. Close runs
// closers, last first (the caller's transfer slot and admission); so does
// a failure to begin.
func (f *Files) BeginUpload(ctx context.Context, se *session.Session, closers ...func()) (*Upload, error) {
	u := &Upload{f: f, ctx: ctx, id: se.ID(), start: time.Now(), closers: closers}
	o, err := open(se, ".", true, false)
	if err != nil {
		u.Close()
		return nil, err
	}
	u.se, u.v, u.buf = o.se, o.v, make([]byte, TransferBuffer)
	u.roots = map[string]*wsfs.Root{o.m.at: o.r}
	u.closers = append(u.closers, func() {
		for _, r := range u.roots {
			r.Close()
		}
	})
	if _, _, _, quota := o.se.Workspace(); !quota {
		if u.used, err = o.r.Usage(ctx, usageDepth, usageEntries); ctx.Err() != nil {
			u.Close()
			return nil, ctx.Err()
		}
	}
	return u, nil
}

// BeginRemoteUpload starts an upload into session id of another replica,
// reached through remote, which checks the session at the first chunk.
// Close runs closers, last first.
func (f *Files) BeginRemoteUpload(ctx context.Context, id string, remote Remote, closers ...func()) *Upload {
	return &Upload{f: f, ctx: ctx, id: id, start: time.Now(), closers: closers, remote: remote, buf: make([]byte, PeerChunk)}
}

// SetMetadata gives every file of the upload md as its metadata
// (CheckMetadata's rules), as envd applies a request's X-Metadata-*
// headers to each file it writes. Call it before Add.
func (u *Upload) SetMetadata(md map[string]string) error {
	md, err := CheckMetadata(md)
	if err != nil {
		u.failed = err
		return err
	}
	u.meta = md
	return nil
}

// rootOf is m's directory, opened once per upload.
func (u *Upload) rootOf(m *mount) (*wsfs.Root, error) {
	if r, ok := u.roots[m.at]; ok {
		return r, nil
	}
	r, err := wsfs.Open(m.host)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errdefs.ErrUnavailable, m.at, err)
	}
	u.roots[m.at] = r
	return r, nil
}

// Add streams body to the file p (parents created), under a temporary
// name until Commit. After a failure the upload can only be closed.
func (u *Upload) Add(p string, body io.Reader) error {
	if u.failed != nil || u.committed {
		return fmt.Errorf("%w: the upload has ended", errdefs.ErrInvalidRequest)
	}
	var err error
	if u.remote != nil {
		err = u.addRemote(p, body)
	} else {
		err = u.addLocal(p, body)
	}
	u.failed = err
	return err
}

// addLocal writes p into this replica's sandbox: a temporary file beside
// its place, which Close renames into place once every file came.
func (u *Upload) addLocal(p string, body io.Reader) error {
	sp, root, prefix, err := u.localTarget(p)
	if err != nil {
		return err
	}
	uid := u.se.SandboxUID()
	rel := sp.rel
	dir := path.Dir(rel)
	if dir != "." && !sp.throughLast { // through a link, its target's directory must exist
		missing := missingDirs(root, dir)
		_, err := root.MkdirAll(dir, 0o755, uid)
		u.dirs = append(u.dirs, missing...)
		if err != nil {
			return fileError(p, err)
		}
	}
	f, tmp, err := root.CreateTemp(dir, prefix, 0o644)
	if err != nil {
		return fileError(p, err)
	}
	u.files = append(u.files, pendingFile{r: root, m: sp.m, tmp: tmp, final: rel, given: p})
	n, err := u.writeLocal(p, sp, f, uid, body)
	if err != nil {
		return err
	}
	if _, _, _, quota := u.se.Workspace(); !quota && sp.m.workspace {
		if u.used += n; u.used > u.f.lim.WorkspaceMax {
			return fmt.Errorf("%w: %q: the workspace would hold more than its limit of %d bytes (SANDBOX_WORKSPACE_SIZE)", errdefs.ErrTooLarge, p, u.f.lim.WorkspaceMax)
		}
	}
	return nil
}

// localTarget resolves where p is written in this replica's sandbox: its
// spot, the root it is in, and the temporary name's prefix (a new file,
// or one that replaces a regular file; never a link, directory or device).
func (u *Upload) localTarget(p string) (spot, *wsfs.Root, string, error) {
	// A symlink is written through, as in a VM: the file lands where the
	// link leads, within the sandbox's view.
	sp, err := u.v.resolve(p, true)
	if err != nil {
		if abs, aerr := u.v.absolute(p); errors.Is(err, errdefs.ErrBadPath) && aerr == nil && !u.v.underWritable(abs) {
			return spot{}, nil, "", u.v.readOnly(p)
		}
		return spot{}, nil, "", err
	}
	if sp.virtual() || !sp.m.writable {
		return spot{}, nil, "", u.v.readOnly(p)
	}
	if sp.rel == "." {
		return spot{}, nil, "", fmt.Errorf("%w: %q is a directory", errdefs.ErrBadPath, p)
	}
	root, err := u.rootOf(sp.m)
	if err != nil {
		return spot{}, nil, "", err
	}
	prefix := uploadPrefix + uploadNew
	if e, err := root.Lstat(sp.rel); err == nil {
		prefix = uploadPrefix + uploadReplaces
		switch {
		case e.Mode&fs.ModeSymlink != 0:
			return spot{}, nil, "", fmt.Errorf("%w: %q changed while it was written", errdefs.ErrBadPath, p)
		case e.Mode.IsDir():
			return spot{}, nil, "", fmt.Errorf("%w: %q is a directory", errdefs.ErrBadPath, p)
		case !e.Mode.IsRegular():
			return spot{}, nil, "", fmt.Errorf("%w: %q is not a regular file", errdefs.ErrBadPath, p)
		}
	}
	return sp, root, prefix, nil
}

// writeLocal copies body into f (p's temporary file) within the file
// limit, gives it to the sandbox's uid with the upload's metadata, and
// closes it; it returns the bytes written.
func (u *Upload) writeLocal(p string, sp spot, f *os.File, uid int, body io.Reader) (int64, error) {
	limit := u.f.lim.MaxFileSize
	w := &errWriter{w: f}
	n, cerr := io.CopyBuffer(w, io.LimitReader(body, limit+1), u.buf)
	if uid >= 0 {
		_ = f.Chown(uid, uid) // the code (another uid on the host) may change it later
	}
	var merr error
	if u.meta != nil && w.err == nil {
		merr = wsfs.SetMetadataFD(int(f.Fd()), u.meta)
	}
	if err := f.Close(); err != nil && w.err == nil {
		w.err = err
	}
	switch {
	case w.err != nil:
		if errors.Is(w.err, syscall.ENOSPC) || errors.Is(w.err, syscall.EDQUOT) || errors.Is(w.err, syscall.EFBIG) {
			if !sp.m.workspace {
				return n, fmt.Errorf("%w: writing %q: %s is full (SANDBOX_TMP_SIZE %d bytes)", errdefs.ErrTooLarge, p, sp.m.at, u.f.lim.TmpSize)
			}
			return n, fmt.Errorf("%w: writing %q: the workspace is full (SANDBOX_WORKSPACE_SIZE %d bytes)", errdefs.ErrTooLarge, p, u.f.lim.WorkspaceMax)
		}
		return n, fmt.Errorf("%w: writing %q: %v", errdefs.ErrTooLarge, p, w.err)
	case cerr != nil:
		return n, bodyError(p, cerr)
	case n > limit:
		return n, fmt.Errorf("%w: %q is over the file limit of %d bytes (SANDBOX_MAX_FILE_SIZE)", errdefs.ErrTooLarge, p, limit)
	case merr != nil:
		return n, metadataError(p, merr)
	}
	return n, nil
}

// missingDirs lists dir and those of its parents that do not exist yet
// in r, parents first: what Close removes again if the upload fails.
func missingDirs(r *wsfs.Root, dir string) []madeDir {
	var missing []madeDir
	for d := dir; d != "." && d != "/"; d = path.Dir(d) {
		if _, err := r.Lstat(d); err == nil {
			break
		}
		missing = append(missing, madeDir{r, d})
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
	limit, total := u.f.lim.MaxFileSize, int64(0)
	for first := true; ; first = false {
		n, rerr := io.ReadFull(body, u.buf)
		if n > 0 || first {
			if total += int64(n); total > limit {
				return fmt.Errorf("%w: %q is over the file limit of %d bytes (SANDBOX_MAX_FILE_SIZE)", errdefs.ErrTooLarge, p, limit)
			}
			var md map[string]string
			if first {
				md = u.meta
			}
			if err := u.remote.Write(u.ctx, tmp, u.buf[:n], md, !first); err != nil {
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
		err := u.remote.Stat(u.ctx, d)
		if err == nil {
			break
		}
		if errdefs.ErrorKind(err) != errdefs.KindFileNotFound {
			return err
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		u.dirs = append(u.dirs, madeDir{rel: missing[i]})
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
		return fmt.Errorf("%w: the upload is over its limit of %d bytes", errdefs.ErrTooLarge, mbe.Limit)
	}
	if errors.Is(err, errdefs.ErrShuttingDown) { // the drain cut the body
		return fmt.Errorf("reading the upload of %q: %w", p, err)
	}
	return fmt.Errorf("%w: reading the upload of %q: %v", errdefs.ErrInvalidRequest, p, err)
}

// Commit puts every file in place and describes them. A rename that
// fails (the code made a directory there meanwhile) leaves those before
// it in place: the error then names them.
func (u *Upload) Commit() ([]FileInfo, error) {
	if u.failed != nil || u.committed {
		return nil, fmt.Errorf("%w: the upload has ended", errdefs.ErrInvalidRequest)
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
		u.f.emit(u.ctx, event.Event{Kind: event.EventFile, Action: "write", Outcome: "success", Duration: time.Since(u.start),
			Detail: fmt.Sprintf("%s: %s (%d bytes, upload)", u.id, fi.Path, fi.Size)})
	}
	return out, nil
}

func (u *Upload) place(f *pendingFile) (*FileInfo, error) {
	if u.remote != nil {
		return u.remote.Move(u.ctx, f.tmp, f.final)
	}
	if err := f.r.Rename(f.tmp, f.final); err != nil {
		if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return nil, fmt.Errorf("%w: %q is a directory", errdefs.ErrBadPath, f.given)
		}
		return nil, fileError(f.given, err)
	}
	o := opened{spot: spot{m: f.m}, r: f.r, se: u.se, v: u.v}
	return o.describe(f.final)
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
		fmt.Fprintf(&b, "%q", bounded.String(f.given, 200))
	}
	return b.String()
}

// Close ends the upload: unless it was committed, what it wrote is
// removed (temporary files, then the directories it made, if empty).
func (u *Upload) Close() {
	if u.failed != nil || !u.committed {
		u.rollback()
	}
	if u.failed != nil {
		u.f.emit(u.ctx, event.Event{Kind: event.EventFile, Action: "write", Outcome: errdefs.ErrorKind(u.failed),
			Duration: time.Since(u.start), Detail: u.failed.Error()})
	}
	for i := len(u.closers) - 1; i >= 0; i-- {
		u.closers[i]()
	}
	u.closers = nil
}

func (u *Upload) rollback() {
	if u.remote != nil {
		// The client may be gone: the clean-up is bounded, not canceled.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), 30*time.Second)
		defer cancel()
		for _, f := range u.files {
			if !f.placed {
				_ = u.remote.Delete(ctx, f.tmp, false)
			}
		}
		for i := len(u.dirs) - 1; i >= 0; i-- {
			_ = u.remote.Delete(ctx, u.dirs[i].rel, true)
		}
		u.files, u.dirs = nil, nil
		return
	}
	for _, f := range u.files {
		if !f.placed && f.r != nil {
			_ = f.r.Remove(f.tmp)
		}
	}
	for i := len(u.dirs) - 1; i >= 0; i-- {
		if d := u.dirs[i]; d.r != nil {
			_ = d.r.RemoveEmptyDir(d.rel) // the code may have put files there meanwhile: then it stays
		}
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
