package service

import (
	"context"
	"errors"

	"github.com/codecage/codecage/internal/service/files"
	"github.com/codecage/codecage/internal/session"
)

// Downloads and uploads stream, so they do not fit do: each one is
// forwarded to the replica holding its session a chunk at a time (as
// read_range, or as write_file, stat_file, move_file and delete_file
// calls), or admitted here once for as long as it lasts.

// OpenFile opens path in a session's workspace for a download: its bytes
// stream from the file, up to the size it had when opened. classify asks
// whether it is text (Download.Text), which costs one more read of it.
// A session of another replica is read a chunk (files.PeerChunk) at a time.
func (s *Service) OpenFile(ctx context.Context, id, owner, p string, classify bool) (*Download, error) {
	slot, err := s.files.AcquireTransfer()
	if err != nil {
		return nil, err
	}
	replica, adopt, err := s.transferPeer(ctx, id, owner)
	if err != nil {
		slot()
		return nil, err
	}
	if replica != "" {
		call := PeerCall{Op: opReadRange, Owner: owner, SessionID: id, Adopt: adopt}
		first, err := forward[*files.FileChunk](ctx, s, replica, call, rangeArgs{Path: p, Classify: classify}, nil, EventFile, "read")
		if err != nil {
			slot()
			return nil, err
		}
		fetch := func(off int64) ([]byte, error) {
			chunk, err := forward[*files.FileChunk](ctx, s, replica, call, rangeArgs{Path: p, Offset: off}, nil, EventFile, "read")
			if err != nil {
				return nil, err
			}
			return chunk.Data, nil
		}
		return files.NewChunkedDownload(first, fetch, slot), nil
	}
	release, err := s.admit(ctx, false)
	if err != nil {
		slot()
		return nil, err
	}
	se, err := s.session(id, owner)
	if err != nil {
		release()
		slot()
		return nil, err
	}
	return s.files.OpenDownload(se, p, classify, slot, release)
}

// transferPeer says where a download or upload of session id is served,
// as do() settles it for every other call: "" when here (this replica
// holds it, or takes it over from the store now), else the replica, and
// whether that one took it over from a replica that stopped (adopt.go).
// A stream is several calls, not do's one forward: for a session of
// another replica, one call first learns whether that replica is alive.
func (s *Service) transferPeer(ctx context.Context, id, owner string) (replica string, adopt bool, err error) {
	r := s.remote(id)
	if r == "" || s.sessions.Has(id) {
		return "", false, nil
	}
	_, err = forward[*SessionInfo](ctx, s, r, PeerCall{Op: opGet, Owner: owner, SessionID: id}, noArgs{}, nil, EventSession, "get")
	if !errors.Is(err, ErrSessionLost) {
		return r, false, err
	}
	who, found := s.adopter(ctx, id, owner)
	switch {
	case !found:
		return "", false, err
	case who != s.cluster.Self():
		return who, true, nil
	}
	// This replica took it over: back from the store, here.
	return "", false, s.persist.BringBack(ctx, owner, id, parkResume)
}

// readChunk reads a chunk of a file for a replica that forwards a
// download (read_range).
func (s *Service) readChunk(id, owner, p string, off int64, classify bool) (*files.FileChunk, error) {
	return inSession(s, id, owner, func(se *session.Session) (*files.FileChunk, error) { return s.files.ReadChunk(se, p, off, classify) })
}

// BeginUpload starts an upload into a session's workspace, all or
// nothing (files.Upload).
func (s *Service) BeginUpload(ctx context.Context, id, owner string) (*Upload, error) {
	slot, err := s.files.AcquireTransfer()
	if err != nil {
		return nil, err
	}
	replica, adopt, err := s.transferPeer(ctx, id, owner)
	if err != nil {
		slot()
		return nil, err
	}
	if replica != "" {
		return s.files.BeginRemoteUpload(ctx, id, peerFiles{s: s, replica: replica, owner: owner, id: id, adopt: adopt}, slot), nil
	}
	release, err := s.admit(ctx, false)
	if err != nil {
		slot()
		return nil, err
	}
	se, err := s.session(id, owner)
	if err != nil {
		release()
		slot()
		return nil, err
	}
	return s.files.BeginUpload(ctx, se, slot, release)
}

// peerFiles is an upload's session on another replica: each call is
// forwarded there (files.Remote).
type peerFiles struct {
	s                  *Service
	replica, owner, id string
	adopt              bool // the replica took the session over (PeerCall.Adopt)
}

func (pf peerFiles) call(op string) PeerCall {
	return PeerCall{Op: op, Owner: pf.owner, SessionID: pf.id, Adopt: pf.adopt}
}

func (pf peerFiles) Write(ctx context.Context, p string, data []byte, md map[string]string, more bool) error {
	args := writeArgs{Path: p, Data: data, Metadata: md, Append: more}
	_, err := forward[*FileInfo](ctx, pf.s, pf.replica, pf.call(opWriteFile), args, nil, EventFile, "write")
	return err
}

func (pf peerFiles) Stat(ctx context.Context, p string) error {
	_, err := forward[*FileInfo](ctx, pf.s, pf.replica, pf.call(opStatFile), pathArgs{Path: p}, nil, EventFile, "stat")
	return err
}

func (pf peerFiles) Move(ctx context.Context, from, to string) (*FileInfo, error) {
	return forward[*FileInfo](ctx, pf.s, pf.replica, pf.call(opMoveFile), moveArgs{Path: from, To: to}, nil, EventFile, "write")
}

func (pf peerFiles) Delete(ctx context.Context, p string, emptyDir bool) error {
	_, err := forward[struct{}](ctx, pf.s, pf.replica, pf.call(opDeleteFile), deleteArgs{Path: p, EmptyDir: emptyDir}, nil, EventFile, "delete")
	return err
}
