package service

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
	"time"

	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/wsfs"
)

// Directory watches: changes in a session's workspace, seen from the host
// (inotify on the workspace's host directory, never inside the sandbox),
// bounded whatever the code does to the tree (wsfs.Watch). A watch lives
// until its caller stops it or its session closes, pauses or is parked.
// It is not forwarded to another replica (a stream that long would pin
// a peer connection): a watch of a session held elsewhere is refused.

// OpWatch starts a directory watch.
const OpWatch = "watch_dir"

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

// ErrWatchEnded: the watch ended with its session (closed, paused,
// parked), or was stopped.
var ErrWatchEnded = errors.New("the watch ended")

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
	release func()

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

// watchSet is the service's watches, by id.
type watchSet struct {
	mu   sync.Mutex
	byID map[string]*Watch
	open int // started or starting, for SANDBOX_MAX_WATCHES
}

// WatchDir starts watching directory p of a session's workspace
// (recursive: and its subdirectories). Stop ends it.
func (s *Service) WatchDir(ctx context.Context, id, owner, p string, recursive bool) (*Watch, error) {
	return do(ctx, s, OpWatch, call[*Watch]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Path: p},
		run: func(ctx context.Context) (*Watch, error) { return s.watchDir(ctx, id, owner, p, recursive) },
		success: func(w *Watch, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "watch", Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s: %s (recursive %t) as %s", id, Quote(p), recursive, w.ID)}
		},
	})
}

func (s *Service) watchDir(ctx context.Context, id, owner, p string, recursive bool) (*Watch, error) {
	if s.cfg.MaxWatches == 0 || s.cfg.SessionMaxWatches == 0 {
		return nil, fmt.Errorf("%w: directory watches are off on this server (SANDBOX_MAX_WATCHES or SANDBOX_SESSION_MAX_WATCHES is 0)", ErrInvalidRequest)
	}
	se, err := s.session(id, owner)
	if err != nil {
		return nil, err
	}
	rel, err := workspacePath(p, se.Home())
	if err != nil {
		return nil, err
	}
	if !s.watches.reserve(s.cfg.MaxWatches) {
		return nil, fmt.Errorf("%w: %d directory watches are open on this server, its limit (SANDBOX_MAX_WATCHES)", ErrTooLarge, s.cfg.MaxWatches)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	w := &Watch{ID: "w" + hex.EncodeToString(b[:]), Session: id, Path: p, owner: owner, stopped: make(chan struct{})}
	dir, done, err := s.sessions.StartWatch(ctx, se, s.cfg.SessionMaxWatches, func() {
		w.stop(fmt.Errorf("%w: session %s closed, paused or was parked", ErrWatchEnded, id))
	})
	if err != nil {
		s.watches.unreserve()
		if errors.Is(err, session.ErrTooManyWatches) {
			err = fmt.Errorf("%w: %v", ErrTooLarge, err)
		}
		return nil, err
	}
	w.release = func() {
		done()
		s.watches.remove(w)
	}
	r, err := wsfs.Open(dir)
	if err != nil {
		w.stop(err)
		return nil, fmt.Errorf("%w: workspace: %v", ErrUnavailable, err)
	}
	ww, err := r.Watch(rel, recursive, wsfs.WatchLimits{Dirs: s.cfg.WatchMaxDirs, Events: WatchEvents, Scan: s.cfg.WatchMaxDirs})
	r.Close()
	if err != nil {
		w.stop(err)
		return nil, watchError(p, err, s.cfg.WatchMaxDirs)
	}
	w.mu.Lock()
	w.w = ww
	stopped := w.why != nil // the session ended meanwhile
	w.mu.Unlock()
	if stopped {
		ww.Close()
		return nil, fmt.Errorf("%w: session %s closed, paused or was parked", ErrSessionEnded, id)
	}
	s.watches.add(w)
	return w, nil
}

func watchError(p string, err error, dirs int) error {
	switch {
	case errors.Is(err, wsfs.ErrWatchTooBig):
		return fmt.Errorf("%w: %s: %v (a recursive watch covers at most %d directories, SANDBOX_WATCH_MAX_DIRS)", ErrTooLarge, Quote(p), err, dirs)
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w: the host has no inotify instances or watches left for %s (fs.inotify.max_user_instances, max_user_watches)", ErrTooLarge, Quote(p))
	}
	return fileError(p, err)
}

// Watch returns the owner's watch id of session sid.
func (s *Service) Watch(sid, owner, id string) (*Watch, error) {
	s.watches.mu.Lock()
	w := s.watches.byID[id]
	s.watches.mu.Unlock()
	if w == nil || w.Session != sid || w.owner != owner {
		return nil, fmt.Errorf("%w: no watcher %s", ErrFileNotFound, Quote(id))
	}
	return w, nil
}

// Next waits for the watch's next events (with an overflow event last
// when some were dropped). It returns io.EOF when the watched directory
// is gone, an ErrWatchEnded when the watch was stopped or its session
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
func (w *Watch) Stop() { w.stop(fmt.Errorf("%w: stopped", ErrWatchEnded)) }

func (w *Watch) stop(why error) {
	w.mu.Lock()
	if w.why != nil {
		w.mu.Unlock()
		return
	}
	w.why = why
	ww := w.w
	close(w.stopped)
	w.mu.Unlock()
	if ww != nil {
		ww.Close() // its inotify instance, and all its kernel watches, go
	}
	if w.release != nil {
		w.release()
	}
}

func (ws *watchSet) reserve(limit int) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.open >= limit {
		return false
	}
	ws.open++
	return true
}

func (ws *watchSet) unreserve() {
	ws.mu.Lock()
	ws.open--
	ws.mu.Unlock()
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
	ws.open--
}

// OpenWatches is how many directory watches are open on this server.
func (s *Service) OpenWatches() int {
	s.watches.mu.Lock()
	defer s.watches.mu.Unlock()
	return s.watches.open
}
