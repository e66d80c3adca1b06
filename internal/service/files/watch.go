package files

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"syscall"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/wsfs"
)

// Directory watches: changes in a session's workspace, seen from the host
// (inotify on the workspace's host directory, never inside the sandbox),
// bounded whatever the code does to the tree (wsfs.Watch). A watch lives
// until its caller stops it or its session closes, pauses or is parked.
// The service does not forward one to another replica (a stream that
// long would pin a peer connection): a watch of a session held elsewhere
// is refused.

// WatchEvents caps the events a watch keeps for its reader; past it they
// are dropped, and the next read ends with one overflow event.
const WatchEvents = 4096

// The types of a watch's events.
const (
	WatchCreate = "create"
	WatchWrite  = "write"
	WatchRemove = "remove"
	WatchRename = "rename"
	WatchChmod  = "chmod"
	// WatchOverflow: events were dropped, or part of the tree is not
	// watched (Reason says which); the watch goes on.
	WatchOverflow = "overflow"
)

// WatchEvent is one change in a watched directory.
type WatchEvent struct {
	// Name is relative to the watched directory ("." for itself).
	Name string `json:"name"`
	Type string `json:"type"`
	// Dropped and Reason describe an overflow.
	Dropped int    `json:"dropped,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

var watchTypes = map[wsfs.Op]string{wsfs.OpCreate: WatchCreate, wsfs.OpWrite: WatchWrite, wsfs.OpRemove: WatchRemove,
	wsfs.OpRename: WatchRename, wsfs.OpChmod: WatchChmod, wsfs.OpOverflow: WatchOverflow}

// Watch is a directory watch.
type Watch struct {
	ID      string
	Session string
	Path    string // the watched directory, as the caller named it
	owner   string

	mu      sync.Mutex
	w       *wsfs.Watcher // nil until it starts
	why     error         // why it stopped; nil while it runs
	stopped chan struct{}
	release func() // frees its places; set once, under mu

	// takeMu orders Takes; movedIn is the upload whose temporary file
	// was just renamed, and uploadWrote the temporary files written to,
	// under takeMu.
	takeMu      sync.Mutex
	movedIn     *movedUpload
	uploadWrote map[string]bool
}

// movedUpload is an upload's temporary file renamed into place: in dir,
// of kind uploadNew or uploadReplaces (or "" if not known), written to.
type movedUpload struct {
	dir, kind string
	wrote     bool
}

// maxUploadsNoted bounds uploadWrote: the code can make files of the
// upload prefix's names too. Past it, a file's content is not noted (its
// rename then reports no write).
const maxUploadsNoted = 256

func (w *Watch) noteUploadWrite(name string) {
	if w.uploadWrote == nil {
		w.uploadWrote = map[string]bool{}
	}
	if len(w.uploadWrote) < maxUploadsNoted {
		w.uploadWrote[name] = true
	}
}

// watchSet is the watches open, by id.
type watchSet struct {
	mu   sync.Mutex
	byID map[string]*Watch
	open int // started or starting, for SANDBOX_MAX_WATCHES
	// byOwner counts open by owner, for SANDBOX_KEY_MAX_WATCHES.
	byOwner map[string]int
}

// CheckWatches refuses a watch when the operator turned watches off.
func (f *Files) CheckWatches() error {
	if f.lim.MaxWatches == 0 || f.lim.SessionMaxWatches == 0 {
		return fmt.Errorf("%w: directory watches are off on this server (SANDBOX_MAX_WATCHES or SANDBOX_SESSION_MAX_WATCHES is 0)", errdefs.ErrInvalidRequest)
	}
	return nil
}

// WatchDir starts watching directory p of se's workspace for its owner
// (recursive: and its subdirectories). Stop ends it.
func (f *Files) WatchDir(ctx context.Context, se *session.Session, p string, recursive bool) (*Watch, error) {
	if err := f.CheckWatches(); err != nil {
		return nil, err
	}
	id, owner := se.ID(), se.Owner()
	rel, err := WorkspacePath(p, se.Home())
	if err != nil {
		return nil, err
	}
	if err := f.watches.reserve(owner, f.lim.MaxWatches, f.lim.KeyMaxWatches); err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	w := &Watch{ID: "w" + hex.EncodeToString(b[:]), Session: id, Path: p, owner: owner, stopped: make(chan struct{})}
	dir, done, err := f.sessions.StartWatch(ctx, se, f.lim.SessionMaxWatches, func() {
		w.stop(fmt.Errorf("%w: session %s closed, paused or was parked", errdefs.ErrWatchEnded, id))
	})
	if err != nil {
		f.watches.unreserve(owner)
		if errors.Is(err, session.ErrTooManyWatches) {
			err = fmt.Errorf("%w: %v", errdefs.ErrTooLarge, err)
		}
		return nil, err
	}
	// The session may end (and call stop) from the moment StartWatch
	// returns: a stop that came before release was set left the place to
	// us, or it would never be freed.
	release := func() {
		done()
		f.watches.remove(w)
	}
	w.mu.Lock()
	w.release = release
	ended := w.why != nil
	w.mu.Unlock()
	if ended {
		release()
		return nil, fmt.Errorf("%w: session %s closed, paused or was parked", errdefs.ErrSessionEnded, id)
	}
	r, err := wsfs.Open(dir)
	if err != nil {
		w.stop(err)
		return nil, fmt.Errorf("%w: workspace: %v", errdefs.ErrUnavailable, err)
	}
	ww, err := r.Watch(rel, recursive, wsfs.WatchLimits{Dirs: f.lim.WatchMaxDirs, Events: WatchEvents, Scan: f.lim.WatchMaxDirs})
	r.Close()
	if err != nil {
		w.stop(err)
		return nil, watchError(p, err, f.lim.WatchMaxDirs)
	}
	w.mu.Lock()
	w.w = ww
	stopped := w.why != nil // the session ended meanwhile
	w.mu.Unlock()
	if stopped {
		ww.Close()
		return nil, fmt.Errorf("%w: session %s closed, paused or was parked", errdefs.ErrSessionEnded, id)
	}
	f.watches.add(w)
	return w, nil
}

func watchError(p string, err error, dirs int) error {
	switch {
	case errors.Is(err, wsfs.ErrWatchTooBig):
		return fmt.Errorf("%w: %s: %v (a recursive watch covers at most %d directories, SANDBOX_WATCH_MAX_DIRS)", errdefs.ErrTooLarge, bounded.Quote(p), err, dirs)
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w: the host has no inotify instances or watches left for %s (fs.inotify.max_user_instances, max_user_watches)", errdefs.ErrTooLarge, bounded.Quote(p))
	}
	return fileError(p, err)
}

// Watch returns the owner's watch id of session sid.
func (f *Files) Watch(sid, owner, id string) (*Watch, error) {
	f.watches.mu.Lock()
	w := f.watches.byID[id]
	f.watches.mu.Unlock()
	if w == nil || w.Session != sid || w.owner != owner {
		return nil, fmt.Errorf("%w: no watcher %s", errdefs.ErrFileNotFound, bounded.Quote(id))
	}
	return w, nil
}

// Next waits for the watch's next events (with an overflow event last
// when some were dropped). It returns io.EOF when the watched directory
// is gone, an errdefs.ErrWatchEnded when the watch was stopped or its session
// ended, and ctx's error when ctx ends first.
func (w *Watch) Next(ctx context.Context) ([]WatchEvent, error) {
	for {
		evs, err := w.Take()
		if len(evs) > 0 || err != nil {
			return evs, err
		}
		select {
		case <-w.w.Ready():
		case <-w.stopped:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Take returns the events kept since the last Take, without waiting.
func (w *Watch) Take() ([]WatchEvent, error) {
	w.mu.Lock()
	why := w.why
	w.mu.Unlock()
	if why != nil {
		return nil, why
	}
	w.takeMu.Lock()
	defer w.takeMu.Unlock()
	evs, err := w.w.Take()
	out := make([]WatchEvent, 0, len(evs))
	for _, e := range evs {
		typ := watchTypes[e.Op]
		// An upload writes a temporary file and renames it into place
		// (all or nothing); envd writes in place. The rename is
		// reported as envd's open(O_CREAT|O_TRUNC), chown and write
		// give: create (or, for a file that was there, the truncation's
		// write), chmod, then write if the file is not empty.
		dir, base := path.Split(e.Name)
		if strings.HasPrefix(base, uploadPrefix) {
			switch e.Op {
			case wsfs.OpWrite:
				w.noteUploadWrite(e.Name)
			case wsfs.OpRename:
				w.movedIn = &movedUpload{dir: dir, kind: strings.TrimPrefix(base, uploadPrefix)[:min(2, len(base)-len(uploadPrefix))], wrote: w.uploadWrote[e.Name]}
				delete(w.uploadWrote, e.Name)
			case wsfs.OpRemove: // an upload that failed
				delete(w.uploadWrote, e.Name)
			}
			continue
		}
		if m := w.movedIn; e.Op == wsfs.OpCreate && m != nil && m.dir == dir {
			w.movedIn = nil
			switch m.kind {
			case uploadNew, uploadReplaces:
				first := WatchCreate
				if m.kind == uploadReplaces {
					first = WatchWrite
				}
				out = append(out, WatchEvent{Name: e.Name, Type: first}, WatchEvent{Name: e.Name, Type: WatchChmod})
				if m.wrote {
					out = append(out, WatchEvent{Name: e.Name, Type: WatchWrite})
				}
			default: // through another replica: whether it was there is not known
				out = append(out, WatchEvent{Name: e.Name, Type: WatchWrite})
			}
			continue
		}
		w.movedIn = nil
		out = append(out, WatchEvent{Name: e.Name, Type: typ, Dropped: e.Dropped, Reason: e.Reason})
	}
	if errors.Is(err, io.EOF) && len(out) == 0 {
		return nil, io.EOF
	}
	return out, err
}

// Stop ends the watch (again: nothing).
func (w *Watch) Stop() { w.stop(fmt.Errorf("%w: stopped", errdefs.ErrWatchEnded)) }

func (w *Watch) stop(why error) {
	w.mu.Lock()
	if w.why != nil {
		w.mu.Unlock()
		return
	}
	w.why = why
	ww, release := w.w, w.release
	close(w.stopped)
	w.mu.Unlock()
	if ww != nil {
		ww.Close() // its inotify instance, and all its kernel watches, go
	}
	if release != nil {
		release()
	}
}

// reserve takes a place for a watch of owner, within owner's share (0
// or less: none) and the server's limit.
func (ws *watchSet) reserve(owner string, limit, share int) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if have := ws.byOwner[owner]; share > 0 && have >= share {
		return fmt.Errorf("%w: this key has %d directory watches open, its share of this server (SANDBOX_KEY_MAX_WATCHES=%d); stop one first",
			errdefs.ErrKeyLimit, have, share)
	}
	if ws.open >= limit {
		return fmt.Errorf("%w: %d directory watches are open on this server, its limit (SANDBOX_MAX_WATCHES)", errdefs.ErrTooLarge, limit)
	}
	if ws.byOwner == nil {
		ws.byOwner = map[string]int{}
	}
	ws.open++
	ws.byOwner[owner]++
	return nil
}

// unreserve frees a place reserve took for owner.
func (ws *watchSet) unreserve(owner string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.freeLocked(owner)
}

func (ws *watchSet) freeLocked(owner string) {
	ws.open--
	if ws.byOwner[owner]--; ws.byOwner[owner] <= 0 {
		delete(ws.byOwner, owner)
	}
}

func (ws *watchSet) add(w *Watch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byID == nil {
		ws.byID = map[string]*Watch{}
	}
	ws.byID[w.ID] = w
}

// remove forgets w and frees its place (it was reserved).
func (ws *watchSet) remove(w *Watch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.byID, w.ID)
	ws.freeLocked(w.owner)
}

// OpenWatches is how many directory watches are open on this server.
func (f *Files) OpenWatches() int {
	f.watches.mu.Lock()
	defer f.watches.mu.Unlock()
	return f.watches.open
}
