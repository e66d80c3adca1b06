package service

import (
	"cmp"
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
	if s.remote(id) != "" && !s.sessions.Has(id) {
		d, here, err := s.openRemote(ctx, id, owner, p, classify, slot)
		if !here {
			if err != nil {
				slot()
			}
			return d, err
		}
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

// openRemote opens a download of another replica's session, a chunk at a
// time; here is true when that replica was gone and this one took the
// session over: it serves the download itself.
func (s *Service) openRemote(ctx context.Context, id, owner, p string, classify bool, slot func()) (d *Download, here bool, err error) {
	replica := s.remote(id)
	call := PeerCall{Op: opReadRange, Owner: owner, SessionID: id}
	first, err := forward[*files.FileChunk](ctx, s, replica, call, rangeArgs{Path: p, Classify: classify}, nil, EventFile, "read")
	if errors.Is(err, ErrSessionLost) {
		who, ok, terr := s.takeOver(ctx, id, owner)
		switch {
		case terr != nil:
			return nil, false, terr
		case ok && who == "":
			return nil, true, nil
		case ok:
			replica, call.Adopt = who, true
			first, err = forward[*files.FileChunk](ctx, s, replica, call, rangeArgs{Path: p, Classify: classify}, nil, EventFile, "read")
		}
	}
	if err != nil {
		return nil, false, err
	}
	fetch := func(off int64) ([]byte, error) {
		chunk, err := forward[*files.FileChunk](ctx, s, replica, call, rangeArgs{Path: p, Offset: off}, nil, EventFile, "read")
		if err != nil {
			return nil, err
		}
		return chunk.Data, nil
	}
	return files.NewChunkedDownload(first, fetch, slot), false, nil
}

// takeOver settles where a session is once a streaming call (a download,
// an upload: several calls, not do's one forward) found its replica gone,
// as do settles it (adopt.go): at the replica that claimed it, or here
// (who is ""), brought back from the store. ok is false when no replica
// took it over: it is lost.
func (s *Service) takeOver(ctx context.Context, id, owner string) (who string, ok bool, err error) {
	who, found := s.adopter(ctx, id, owner)
	switch {
	case !found:
		return "", false, nil
	case who != s.cluster.Self():
		return who, true, nil
	}
	return "", true, s.persist.BringBack(ctx, owner, id, parkResume)
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
	if replica := s.remote(id); replica != "" && !s.sessions.Has(id) {
		return s.files.BeginRemoteUpload(ctx, id, &peerFiles{s: s, replica: replica, owner: owner, id: id}, slot), nil
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
// forwarded there (files.Remote); should that replica be gone, to the one
// that took the session over (this one too, through its own peer
// endpoint: the upload has begun remote).
type peerFiles struct {
	s                  *Service
	replica, owner, id string
	adopt              bool // the replica took the session over (PeerCall.Adopt)
}

// forwardFile forwards one call of an upload.
func forwardFile[T any](ctx context.Context, pf *peerFiles, op string, args any, action string) (T, error) {
	call := func() (T, error) {
		return forward[T](ctx, pf.s, pf.replica, PeerCall{Op: op, Owner: pf.owner, SessionID: pf.id, Adopt: pf.adopt}, args, nil, EventFile, action)
	}
	res, err := call()
	if !errors.Is(err, ErrSessionLost) || pf.adopt {
		return res, err
	}
	who, ok, terr := pf.s.takeOver(ctx, pf.id, pf.owner)
	if terr != nil || !ok {
		return res, cmp.Or(terr, err)
	}
	pf.replica, pf.adopt = cmp.Or(who, pf.s.cluster.Self()), true
	return call()
}

func (pf *peerFiles) Write(ctx context.Context, p string, data []byte, md map[string]string, more bool) error {
	_, err := forwardFile[*FileInfo](ctx, pf, opWriteFile, writeArgs{Path: p, Data: data, Metadata: md, Append: more}, "write")
	return err
}

func (pf *peerFiles) Stat(ctx context.Context, p string) error {
	_, err := forwardFile[*FileInfo](ctx, pf, opStatFile, pathArgs{Path: p}, "stat")
	return err
}

func (pf *peerFiles) Move(ctx context.Context, from, to string) (*FileInfo, error) {
	return forwardFile[*FileInfo](ctx, pf, opMoveFile, moveArgs{Path: from, To: to}, "write")
}

func (pf *peerFiles) Delete(ctx context.Context, p string, emptyDir bool) error {
	_, err := forwardFile[struct{}](ctx, pf, opDeleteFile, deleteArgs{Path: p, EmptyDir: emptyDir}, "delete")
	return err
}
