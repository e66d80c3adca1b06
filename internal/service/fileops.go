package service

import (
	"context"
	"errors"
	"fmt"
	"path"
	"syscall"
	"time"
)

// File operations beyond read, write, list and delete: what a program
// written against a VM's filesystem expects (the E2B surface's Stat,
// MakeDir, Move and ListDir).

// StatFile describes one entry of a session's workspace (a symlink is
// described, not followed).
func (s *Service) StatFile(ctx context.Context, id, owner, p string) (*FileInfo, error) {
	return do(ctx, s, OpStatFile, call[*FileInfo]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Path: p},
		run: func(context.Context) (*FileInfo, error) {
			o, err := s.open(id, owner, p, false, false)
			if err != nil {
				return nil, err
			}
			defer o.Close()
			return o.stat()
		},
	})
}

// ListDir lists a directory of a session's workspace, depth levels deep
// (1: its entries only; 0: all of the tree, up to MaxListDepth), within
// MaxListedFiles and MaxListBytes: FileList.Truncated says when it stopped
// at one of them.
func (s *Service) ListDir(ctx context.Context, id, owner, p string, depth int) (*FileList, error) {
	return do(ctx, s, OpListFiles, call[*FileList]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Path: p, Depth: depth},
		check: func() error {
			if depth < 0 || depth > MaxListDepth {
				return fmt.Errorf("%w: depth %d is not between 0 (all) and %d", ErrInvalidRequest, depth, MaxListDepth)
			}
			return nil
		},
		run: func(ctx context.Context) (*FileList, error) { return s.listDir(ctx, id, owner, p, depth) },
	})
}

// MakeDir creates a directory and its parents in a session's workspace; it
// reports false when the directory was already there.
func (s *Service) MakeDir(ctx context.Context, id, owner, p string) (bool, error) {
	return do(ctx, s, OpMakeDir, call[bool]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Path: p},
		run: func(context.Context) (bool, error) { return s.makeDir(id, owner, p) },
		success: func(_ bool, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "mkdir", Outcome: "success", Duration: took, Detail: id + ": " + p}
		},
	})
}

func (s *Service) makeDir(id, owner, p string) (bool, error) {
	o, err := s.open(id, owner, p, true, false)
	if err != nil {
		// Out of the view: refused as a read-only place when it is one.
		if _, werr := s.open(id, owner, p, true, true); errors.Is(werr, ErrPermission) {
			return false, werr
		}
		return false, err
	}
	defer o.Close()
	if o.r == nil || o.rel == "." {
		return false, nil // a directory of the view itself: already there
	}
	if e, err := o.r.Lstat(o.rel); err == nil {
		if !e.Mode.IsDir() {
			return false, fmt.Errorf("%w: %q exists and is not a directory", ErrBadPath, p)
		}
		return false, nil
	}
	if !o.m.writable {
		return false, o.v.readOnly(p)
	}
	if _, err := o.r.MkdirAll(o.rel, 0o755, o.se.SandboxUID()); err != nil {
		return false, fileError(p, err)
	}
	return true, nil
}

// MoveFile renames a file or directory within a session's writable
// filesystem, creating the destination's parents, and describes it at
// its new place.
func (s *Service) MoveFile(ctx context.Context, id, owner, from, to string) (*FileInfo, error) {
	return do(ctx, s, OpMoveFile, call[*FileInfo]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Path: from, To: to},
		run: func(context.Context) (*FileInfo, error) { return s.moveFile(id, owner, from, to) },
		success: func(_ *FileInfo, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "move", Outcome: "success", Duration: took, Detail: id + ": " + from + " -> " + to}
		},
	})
}

func (s *Service) moveFile(id, owner, from, to string) (*FileInfo, error) {
	src, err := s.open(id, owner, from, false, true)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := s.open(id, owner, to, false, true)
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	if src.rel == "." || dst.rel == "." {
		return nil, fmt.Errorf("%w: %s itself cannot be moved or replaced", ErrBadPath, src.m.at)
	}
	if src.m.host != dst.m.host {
		// Two file systems on the host: a rename cannot join them.
		return nil, fmt.Errorf("%w: %q and %q are on different file systems (%s and %s); copy the file instead", ErrInvalidRequest, from, to, src.m.at, dst.m.at)
	}
	r := src.r
	if _, err := r.Lstat(src.rel); err != nil {
		return nil, fileError(from, err)
	}
	if dir := path.Dir(dst.rel); dir != "." {
		if _, err := r.MkdirAll(dir, 0o755, src.se.SandboxUID()); err != nil {
			return nil, fileError(to, err)
		}
	}
	if err := r.Rename(src.rel, dst.rel); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return nil, fmt.Errorf("%w: %q is a directory that is not empty", ErrBadPath, to)
		}
		return nil, fileError(to, err)
	}
	return dst.describe(dst.rel)
}
