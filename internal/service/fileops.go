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
			r, se, rel, err := s.root(id, owner, p)
			if err != nil {
				return nil, err
			}
			defer r.Close()
			return stat(r, se.Home(), rel)
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
	r, se, rel, err := s.root(id, owner, p)
	if err != nil {
		return false, err
	}
	defer r.Close()
	if e, err := r.Lstat(rel); err == nil {
		if !e.Mode.IsDir() {
			return false, fmt.Errorf("%w: %q exists and is not a directory", ErrBadPath, p)
		}
		return false, nil
	}
	if _, err := r.MkdirAll(rel, 0o755, se.SandboxUID()); err != nil {
		return false, fileError(p, err)
	}
	return true, nil
}

// MoveFile renames a file or directory within a session's workspace,
// creating the destination's parents, and describes it at its new place.
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
	r, se, src, err := s.root(id, owner, from)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	dst, err := workspacePath(to, se.Home())
	if err != nil {
		return nil, err
	}
	if src == "." || dst == "." {
		return nil, fmt.Errorf("%w: the workspace itself cannot be moved or replaced", ErrBadPath)
	}
	if _, err := r.Lstat(src); err != nil {
		return nil, fileError(from, err)
	}
	if dir := path.Dir(dst); dir != "." {
		if _, err := r.MkdirAll(dir, 0o755, se.SandboxUID()); err != nil {
			return nil, fileError(to, err)
		}
	}
	if err := r.Rename(src, dst); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return nil, fmt.Errorf("%w: %q is a directory that is not empty", ErrBadPath, to)
		}
		return nil, fileError(to, err)
	}
	return stat(r, se.Home(), dst)
}
