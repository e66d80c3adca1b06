package service

import (
	"context"
	"time"
)

// The rows of ops that another replica may forward: how each one's call
// is served here, and how long its run may take.

func serveExecute(ctx context.Context, s *Service, call PeerCall, onOutput func(stream, line string)) (any, error) {
	if call.Execute == nil {
		return nil, errUnknownOp(call.Op)
	}
	req := *call.Execute
	req.Owner, req.OnOutput = call.Owner, onOutput
	return s.Execute(ctx, req)
}

func serveCommand(ctx context.Context, s *Service, call PeerCall, onOutput func(stream, line string)) (any, error) {
	if call.Command == nil {
		return nil, errUnknownOp(call.Op)
	}
	req := *call.Command
	req.Owner, req.OnOutput = call.Owner, onOutput
	return s.RunCommand(ctx, req)
}

func serveInstall(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	if call.Install == nil {
		return nil, errUnknownOp(call.Op)
	}
	req := *call.Install
	req.Owner = call.Owner
	return s.PipInstall(ctx, req)
}

func serveGet(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.GetSession(ctx, call.SessionID, call.Owner)
}

func serveList(_ context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.localSessions(call.Owner), nil
}

func serveRestart(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.RestartSession(ctx, call.SessionID, call.Owner)
}

func servePause(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.PauseSession(ctx, call.SessionID, call.Owner, PauseMode{KeepMemory: call.KeepMemory, Park: call.Park})
}

// resumed is a resume's answer across replicas.
type resumed struct {
	Info    *SessionInfo `json:"info"`
	Resumed bool         `json:"resumed"`
}

func serveResume(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	info, ok, err := s.ResumeSession(ctx, call.SessionID, call.Owner)
	return resumed{info, ok}, err
}

func serveSnapshot(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.SnapshotSession(ctx, call.SessionID, call.Owner, call.Name)
}

func serveFork(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.ForkSession(ctx, call.SessionID, call.Owner, call.Count, call.Lifetime)
}

// runSnapshot: a snapshot waits for the request in progress, then copies
// memory and files.
func runSnapshot(s *Service, _ PeerCall) time.Duration { return s.cfg.MaxTimeout + 5*time.Minute }

// runPause: a pause waits for the request in progress in the session.
func runPause(s *Service, _ PeerCall) time.Duration { return s.cfg.MaxTimeout + 10*time.Second }

func serveClose(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return struct{}{}, s.CloseSession(ctx, call.SessionID, call.Owner)
}

func serveLifetime(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.SetSessionLifetime(ctx, call.SessionID, call.Owner, call.Lifetime)
}

func serveWriteFile(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	if call.Append {
		// A later chunk of an upload: the forwarder's first chunk was
		// admitted (and counted against the caller's rate).
		return s.appendFile(ctx, call.SessionID, call.Owner, call.Path, call.Data)
	}
	return s.WriteFileWith(ctx, call.SessionID, call.Owner, call.Path, call.Data, call.Metadata)
}

func serveReadFile(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.ReadFile(ctx, call.SessionID, call.Owner, call.Path)
}

// serveReadRange reads a chunk of a download; OpenFile, which streams a
// local file, does not go through do, so the admission is written here.
func serveReadRange(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	if call.Offset == 0 {
		// A download's first chunk is admitted (and counted against the
		// caller's rate) once; the rest are parts of it.
		release, err := s.admit(ctx, false)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	return s.readChunk(call.SessionID, call.Owner, call.Path, call.Offset, call.Classify)
}

func serveListFiles(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	if call.Depth > 0 {
		return s.ListDir(ctx, call.SessionID, call.Owner, call.Path, call.Depth)
	}
	return s.ListFiles(ctx, call.SessionID, call.Owner, call.Path)
}

func serveDeleteFile(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	if call.EmptyDir {
		return struct{}{}, s.removeEmptyDir(call.SessionID, call.Owner, call.Path)
	}
	return struct{}{}, s.DeleteFile(ctx, call.SessionID, call.Owner, call.Path)
}

func serveStatFile(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.StatFile(ctx, call.SessionID, call.Owner, call.Path)
}

func serveMakeDir(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.MakeDir(ctx, call.SessionID, call.Owner, call.Path)
}

func serveMoveFile(ctx context.Context, s *Service, call PeerCall, _ func(stream, line string)) (any, error) {
	return s.MoveFile(ctx, call.SessionID, call.Owner, call.Path, call.To)
}

func runExecute(s *Service, call PeerCall) time.Duration {
	if call.Execute == nil {
		return 0
	}
	return max(s.cfg.Timeout, call.Execute.Timeout)
}

func runCommandCall(s *Service, call PeerCall) time.Duration {
	if call.Command == nil {
		return 0
	}
	return max(s.cfg.Timeout, call.Command.Timeout)
}

func runInstall(s *Service, call PeerCall) time.Duration {
	if call.Install == nil {
		return 0
	}
	return s.cfg.PipTimeout
}

// runRestart: a gVisor sandbox may take seconds to start.
func runRestart(*Service, PeerCall) time.Duration { return time.Minute }
