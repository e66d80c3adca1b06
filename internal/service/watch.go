package service

import (
	"context"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/session"
)

// opWatch starts a directory watch. A watch runs where its session is:
// it is not served for another replica (a stream that long would pin a
// peer connection; its row has no peer), so a watch of a session held
// elsewhere is refused.
const opWatch = "watch_dir"

// WatchDir starts watching directory p of a session's workspace
// (recursive: and its subdirectories). Stop ends it.
func (s *Service) WatchDir(ctx context.Context, id, owner, p string, recursive bool) (*Watch, error) {
	return do(ctx, s, opWatch, call[*Watch]{
		session: id, owner: owner, args: pathArgs{Path: p},
		run: func(ctx context.Context) (*Watch, error) {
			if err := s.files.CheckWatches(); err != nil { // before the session, as ever
				return nil, err
			}
			return inSession(s, id, owner, func(se *session.Session) (*Watch, error) { return s.files.WatchDir(ctx, se, p, recursive) })
		},
		success: func(w *Watch, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "watch", Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s: %s (recursive %t) as %s", id, Quote(p), recursive, w.ID)}
		},
	})
}

// Watch returns the owner's watch id of session sid.
func (s *Service) Watch(sid, owner, id string) (*Watch, error) { return s.files.Watch(sid, owner, id) }

// OpenWatches is how many directory watches are open on this server.
func (s *Service) OpenWatches() int { return s.files.OpenWatches() }
