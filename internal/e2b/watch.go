package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"connectrpc.com/connect"
	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/service"
)

// envd's directory watches: WatchDir streams a watch's events (what the
// JS SDK's files.watchDir reads); CreateWatcher, GetWatcherEvents and
// RemoveWatcher are the same watch, polled (the Python SDK's). The watch
// itself is the service's (service.WatchDir): inotify on the workspace's
// host directory, bounded. Events of a watch that missed some (the
// reader fell behind, the kernel's queue overflowed, a tree too big to
// follow) end it with an error, as envd's does when inotify overflows.

// withEntries marks a polled watcher's id: its events carry entries. The
// id goes back to the client and comes back with each poll, so the
// choice needs no state of its own here.
const withEntries = "e."

var eventTypes = map[string]string{
	service.WatchCreate: "EVENT_TYPE_CREATE", service.WatchWrite: "EVENT_TYPE_WRITE", service.WatchRemove: "EVENT_TYPE_REMOVE",
	service.WatchRename: "EVENT_TYPE_RENAME", service.WatchChmod: "EVENT_TYPE_CHMOD",
}

// fsEvents turns a watch's events into envd's; an overflow among them is
// the error that ends the watch, after the events before it. With
// entries, each event whose path still exists carries its entry, as
// envd's does (best effort: a file gone since has none).
func (s *Server) fsEvents(ctx context.Context, w *service.Watch, evs []service.WatchEvent, entries bool) ([]wire.FsEvent, error) {
	out := make([]wire.FsEvent, 0, len(evs))
	ref := sandboxOf(ctx)
	for _, e := range evs {
		if e.Type == service.WatchOverflow {
			return out, connect.NewError(connect.CodeResourceExhausted,
				fmt.Errorf("the watch missed events (%s); start a new one", e.Reason))
		}
		ev := wire.FsEvent{Name: e.Name, Type: eventTypes[e.Type]}
		if entries && e.Type != service.WatchRemove {
			if fi, err := s.svc.StatFile(ctx, ref.id, ref.owner, path.Join(w.Path, e.Name)); err == nil {
				ev.Entry = entry(fi)
			}
		}
		out = append(out, ev)
	}
	return out, nil
}

// watchEnded is the error of a watch that ended without its caller: the
// stream breaks when the sandbox went (as with envd's VM), else the
// sandbox paused.
func (s *Server) watchEnded(ctx context.Context, ref sandboxRef, err error) error {
	if s.sandboxGone(ctx, ref) {
		breakStream()
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

func (s *Server) watchDir(ctx context.Context, req *connect.Request[wire.WatchDirRequest], stream *connect.ServerStream[wire.WatchDirResponse]) error {
	ref := sandboxOf(ctx)
	w, err := s.svc.WatchDir(ctx, ref.id, ref.owner, sandboxPath(req.Msg.Path), req.Msg.Recursive)
	if err != nil {
		return rpcError(err)
	}
	defer w.Stop()
	if err := stream.Send(&wire.WatchDirResponse{Start: &wire.Empty{}}); err != nil {
		return err
	}
	keepalive := keepaliveOf(req.Header())
	for {
		quiet, cancel := context.WithTimeout(ctx, keepalive)
		evs, err := w.Next(quiet)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err() // the client's timeoutMs, or it went away
		case errors.Is(err, context.DeadlineExceeded):
			if err := stream.Send(&wire.WatchDirResponse{Keepalive: &wire.Empty{}}); err != nil {
				return err
			}
			continue
		case errors.Is(err, io.EOF):
			return nil // the watched directory is gone
		case errors.Is(err, service.ErrWatchEnded):
			return s.watchEnded(ctx, ref, err)
		case err != nil:
			return rpcError(err)
		}
		out, missed := s.fsEvents(ctx, w, evs, req.Msg.IncludeEntry)
		for i := range out {
			if err := stream.Send(&wire.WatchDirResponse{Filesystem: &out[i]}); err != nil {
				return err
			}
		}
		if missed != nil {
			return missed
		}
	}
}

func (s *Server) createWatcher(ctx context.Context, req *connect.Request[wire.WatchDirRequest]) (*connect.Response[wire.WatcherRequest], error) {
	ref := sandboxOf(ctx)
	w, err := s.svc.WatchDir(ctx, ref.id, ref.owner, sandboxPath(req.Msg.Path), req.Msg.Recursive)
	if err != nil {
		return nil, rpcError(err)
	}
	id := w.ID
	if req.Msg.IncludeEntry {
		id = withEntries + id
	}
	return connect.NewResponse(&wire.WatcherRequest{WatcherID: id}), nil
}

// watcher is the caller's watcher of the request's sandbox, and whether
// its events carry entries.
func (s *Server) watcher(ctx context.Context, id string) (*service.Watch, bool, error) {
	ref := sandboxOf(ctx)
	bare, entries := strings.CutPrefix(id, withEntries)
	w, err := s.svc.Watch(ref.id, ref.owner, bare)
	if err != nil {
		// envd's words for an unknown watcher.
		return nil, false, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", service.Quote(strings.TrimSpace(id))))
	}
	return w, entries, nil
}

func (s *Server) getWatcherEvents(ctx context.Context, req *connect.Request[wire.WatcherRequest]) (*connect.Response[wire.WatcherEventsResponse], error) {
	w, entries, err := s.watcher(ctx, req.Msg.WatcherID)
	if err != nil {
		return nil, err
	}
	evs, err := w.Take()
	switch {
	case errors.Is(err, io.EOF):
		err = nil // the watched directory is gone: no more events
	case errors.Is(err, service.ErrWatchEnded):
		return nil, connect.NewError(connect.CodeUnavailable, err)
	case err != nil:
		return nil, rpcError(err)
	}
	out, missed := s.fsEvents(ctx, w, evs, entries)
	if missed != nil {
		return nil, missed
	}
	return connect.NewResponse(&wire.WatcherEventsResponse{Events: out}), nil
}

func (s *Server) removeWatcher(ctx context.Context, req *connect.Request[wire.WatcherRequest]) (*connect.Response[wire.Empty], error) {
	w, _, err := s.watcher(ctx, req.Msg.WatcherID)
	if err != nil {
		return nil, err
	}
	w.Stop()
	return connect.NewResponse(&wire.Empty{}), nil
}
