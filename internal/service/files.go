package service

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/codecage/codecage/internal/service/files"
	"github.com/codecage/codecage/internal/session"
)

// The file API is the files domain (internal/service/files); here are its
// operations in the service's envelope, each on the session do resolved
// once, and its names as the surfaces spell them (service.FileInfo).

// The file API's types (files documents each). Aliases: the OpenAPI
// schema and the MCP output schema keep their names.
type (
	FileInfo    = files.FileInfo
	FileList    = files.FileList
	LinkEnd     = files.LinkEnd
	FileContent = files.FileContent
	Download    = files.Download
	Upload      = files.Upload
	Watch       = files.Watch
	WatchEvent  = files.WatchEvent
)

// The file API's bounds and a watch's event types (files documents each).
const (
	MaxListedFiles   = files.MaxListedFiles
	MaxListDepth     = files.MaxListDepth
	MaxListBytes     = files.MaxListBytes
	TransferBuffer   = files.TransferBuffer
	MaxMetadataKeys  = files.MaxMetadataKeys
	MaxMetadataBytes = files.MaxMetadataBytes
	WatchEvents      = files.WatchEvents
	WatchCreate      = files.WatchCreate
	WatchWrite       = files.WatchWrite
	WatchRemove      = files.WatchRemove
	WatchRename      = files.WatchRename
	WatchChmod       = files.WatchChmod
	WatchOverflow    = files.WatchOverflow
)

// EncodeContent returns data as a FileContent (files.EncodeContent).
func EncodeContent(path string, data []byte) FileContent { return files.EncodeContent(path, data) }

// WriteContentJSON writes d as a FileContent JSON document
// (files.WriteContentJSON).
func WriteContentJSON(w io.Writer, shown string, d *Download) error {
	return files.WriteContentJSON(w, shown, d)
}

// newFiles is the file domain of a service whose session table is made.
func (s *Service) newFiles() *files.Files {
	c := s.cfg
	return files.New(files.Options{Sessions: s.sessions, Emit: s.emit, Limits: files.Limits{
		MaxFileSize: c.MaxFileSize, WorkspaceMax: c.WorkspaceMax, TmpSize: c.TmpSize, MaxTransfers: c.MaxTransfers,
		MaxWatches: c.MaxWatches, SessionMaxWatches: c.SessionMaxWatches, KeyMaxWatches: c.KeyMaxWatches, WatchMaxDirs: c.WatchMaxDirs,
	}})
}

// inSession runs fn on the caller's session id, looked up once.
func inSession[T any](s *Service, id, owner string, fn func(*session.Session) (T, error)) (T, error) {
	se, err := s.session(id, owner)
	if err != nil {
		var zero T
		return zero, err
	}
	return fn(se)
}

// WriteFile writes data to path in a session's filesystem (its
// workspace, or its /tmp), creating parent directories, within the
// file-size and workspace limits.
func (s *Service) WriteFile(ctx context.Context, id, owner, p string, data []byte) (*FileInfo, error) {
	return s.WriteFileWith(ctx, id, owner, p, data, nil)
}

// WriteFileWith is WriteFile that stores md as the file's metadata
// (replacing what it had; files.CheckMetadata's rules).
func (s *Service) WriteFileWith(ctx context.Context, id, owner, p string, data []byte, md map[string]string) (*FileInfo, error) {
	return do(ctx, s, opWriteFile, call[*FileInfo]{
		session: id, owner: owner, args: writeArgs{Path: p, Data: data, Metadata: md},
		run: func(ctx context.Context) (*FileInfo, error) {
			if err := s.files.CheckWrite(data, md); err != nil { // before the session, as ever
				return nil, err
			}
			return inSession(s, id, owner, func(se *session.Session) (*FileInfo, error) { return s.files.Write(ctx, se, p, data, md) })
		},
		success: func(fi *FileInfo, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "write", Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s: %s (%d bytes)", id, fi.Path, len(data))}
		},
	})
}

// appendFile adds data to the end of an existing file (a later chunk of
// an upload forwarded from another replica).
func (s *Service) appendFile(ctx context.Context, id, owner, p string, data []byte) (*FileInfo, error) {
	return inSession(s, id, owner, func(se *session.Session) (*FileInfo, error) { return s.files.Append(ctx, se, p, data) })
}

// ReadFile returns the contents of path in a session's workspace, whole
// (up to SANDBOX_MAX_FILE_SIZE); it holds a transfer slot while it reads.
// Downloads use OpenFile, which streams.
func (s *Service) ReadFile(ctx context.Context, id, owner, p string) ([]byte, error) {
	slot, err := s.files.AcquireTransfer()
	if err != nil {
		return nil, err
	}
	defer slot()
	return do(ctx, s, opReadFile, call[[]byte]{
		session: id, owner: owner, args: pathArgs{Path: p},
		run: func(context.Context) ([]byte, error) {
			return inSession(s, id, owner, func(se *session.Session) ([]byte, error) { return s.files.Read(se, p) })
		},
	})
}

// ListFiles lists the workspace below path ("" or "." for all of it, as
// deep as MaxListDepth).
func (s *Service) ListFiles(ctx context.Context, id, owner, p string) (*FileList, error) {
	return s.ListDir(ctx, id, owner, p, 0)
}

// ListDir lists a directory of a session's workspace, depth levels deep
// (1: its entries only; 0: all of the tree, up to MaxListDepth), within
// MaxListedFiles and MaxListBytes: FileList.Truncated says when it
// stopped at one of them.
func (s *Service) ListDir(ctx context.Context, id, owner, p string, depth int) (*FileList, error) {
	return do(ctx, s, opListFiles, call[*FileList]{
		session: id, owner: owner, args: listArgs{Path: p, Depth: depth},
		check: func() error { return files.CheckDepth(depth) },
		run: func(ctx context.Context) (*FileList, error) {
			return inSession(s, id, owner, func(se *session.Session) (*FileList, error) { return s.files.List(ctx, se, p, depth) })
		},
	})
}

// StatFile describes one entry of a session's workspace (a symlink is
// described, not followed).
func (s *Service) StatFile(ctx context.Context, id, owner, p string) (*FileInfo, error) {
	return do(ctx, s, opStatFile, call[*FileInfo]{
		session: id, owner: owner, args: pathArgs{Path: p},
		run: func(context.Context) (*FileInfo, error) {
			return inSession(s, id, owner, func(se *session.Session) (*FileInfo, error) { return s.files.Stat(se, p) })
		},
	})
}

// DeleteFile removes a file or a directory tree from the workspace.
func (s *Service) DeleteFile(ctx context.Context, id, owner, p string) error {
	_, err := do(ctx, s, opDeleteFile, call[struct{}]{
		session: id, owner: owner, args: deleteArgs{Path: p},
		run: func(ctx context.Context) (struct{}, error) {
			return inSession(s, id, owner, func(se *session.Session) (struct{}, error) { return struct{}{}, s.files.Delete(ctx, se, p) })
		},
		success: func(_ struct{}, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "delete", Outcome: "success", Duration: took, Detail: id + ": " + p}
		},
	})
	return err
}

// removeEmptyDir removes a directory of the workspace if it is empty.
func (s *Service) removeEmptyDir(id, owner, p string) error {
	_, err := inSession(s, id, owner, func(se *session.Session) (struct{}, error) { return struct{}{}, s.files.RemoveEmptyDir(se, p) })
	return err
}

// MakeDir creates a directory and its parents in a session's workspace; it
// reports false when the directory was already there.
func (s *Service) MakeDir(ctx context.Context, id, owner, p string) (bool, error) {
	return do(ctx, s, opMakeDir, call[bool]{
		session: id, owner: owner, args: pathArgs{Path: p},
		run: func(context.Context) (bool, error) {
			return inSession(s, id, owner, func(se *session.Session) (bool, error) { return s.files.MakeDir(se, p) })
		},
		success: func(_ bool, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "mkdir", Outcome: "success", Duration: took, Detail: id + ": " + p}
		},
	})
}

// MoveFile renames a file or directory within a session's writable
// filesystem, creating the destination's parents, and describes it at
// its new place.
func (s *Service) MoveFile(ctx context.Context, id, owner, from, to string) (*FileInfo, error) {
	return do(ctx, s, opMoveFile, call[*FileInfo]{
		session: id, owner: owner, args: moveArgs{Path: from, To: to},
		run: func(context.Context) (*FileInfo, error) {
			return inSession(s, id, owner, func(se *session.Session) (*FileInfo, error) { return s.files.Move(se, from, to) })
		},
		success: func(_ *FileInfo, took time.Duration) Event {
			return Event{Kind: EventFile, Action: "move", Outcome: "success", Duration: took, Detail: id + ": " + from + " -> " + to}
		},
	})
}

// The file operations, and the arguments each one forwards (their JSON
// names are the old protocol's, peerv1.go).
const (
	opWriteFile  = "write_file"
	opReadFile   = "read_file"
	opReadRange  = "read_range" // a chunk of a download (OpenFile)
	opListFiles  = "list_files"
	opDeleteFile = "delete_file"
	opStatFile   = "stat_file"
	opMakeDir    = "make_dir"
	opMoveFile   = "move_file"
)

func fileOps() map[string]op {
	return map[string]op{
		opWriteFile:  {admit: admitLight, kind: EventFile, action: "write", peer: peerOp[writeArgs, *FileInfo]{do: serveWriteFile}},
		opReadFile:   {admit: admitLight, kind: EventFile, action: "read", quiet: true, peer: peerOp[pathArgs, []byte]{do: serveReadFile}},
		opReadRange:  {admit: admitLight, kind: EventFile, action: "read", quiet: true, peer: peerOp[rangeArgs, *files.FileChunk]{do: serveReadRange}},
		opListFiles:  {admit: admitLight, kind: EventFile, action: "list", quiet: true, peer: peerOp[listArgs, *FileList]{do: serveListFiles}},
		opDeleteFile: {admit: admitLight, kind: EventFile, action: "delete", peer: peerOp[deleteArgs, struct{}]{do: serveDeleteFile}},
		opStatFile:   {admit: admitLight, kind: EventFile, action: "stat", quiet: true, peer: peerOp[pathArgs, *FileInfo]{do: serveStatFile}},
		opMakeDir:    {admit: admitLight, kind: EventFile, action: "mkdir", peer: peerOp[pathArgs, bool]{do: serveMakeDir}},
		opMoveFile:   {admit: admitLight, kind: EventFile, action: "move", peer: peerOp[moveArgs, *FileInfo]{do: serveMoveFile}},
		// A watch runs here only: not served for another replica, see watch.go.
		opWatch: {admit: admitLight, kind: EventFile, action: "watch"},
	}
}

type pathArgs struct {
	Path string `json:"path,omitempty"`
}

// writeArgs: Append adds Data to the end of the file (a later chunk of an
// upload) instead of replacing it; Metadata is the file's (its first chunk).
type writeArgs struct {
	Path     string            `json:"path,omitempty"`
	Data     []byte            `json:"data,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Append   bool              `json:"append,omitempty"`
}

func serveWriteFile(ctx context.Context, s *Service, call PeerCall, a writeArgs, _ outputFunc) (*FileInfo, error) {
	if a.Append {
		// A later chunk of an upload: the forwarder's first chunk was
		// admitted (and counted against the caller's rate).
		return s.appendFile(ctx, call.SessionID, call.Owner, a.Path, a.Data)
	}
	return s.WriteFileWith(ctx, call.SessionID, call.Owner, a.Path, a.Data, a.Metadata)
}

func serveReadFile(ctx context.Context, s *Service, call PeerCall, a pathArgs, _ outputFunc) ([]byte, error) {
	return s.ReadFile(ctx, call.SessionID, call.Owner, a.Path)
}

// rangeArgs read a chunk of a download from Offset; Classify asks whether
// the file is text.
type rangeArgs struct {
	Path     string `json:"path,omitempty"`
	Offset   int64  `json:"offset,omitempty"`
	Classify bool   `json:"classify,omitempty"`
}

// serveReadRange reads a chunk of a download; OpenFile, which streams a
// local file, does not go through do, so the admission is written here.
func serveReadRange(ctx context.Context, s *Service, call PeerCall, a rangeArgs, _ outputFunc) (*files.FileChunk, error) {
	if a.Offset == 0 {
		// A download's first chunk is admitted (and counted against the
		// caller's rate) once; the rest are parts of it.
		release, err := s.admit(ctx, false)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	return s.readChunk(call.SessionID, call.Owner, a.Path, a.Offset, a.Classify)
}

// listArgs: Depth bounds the listing (0: the whole tree).
type listArgs struct {
	Path  string `json:"path,omitempty"`
	Depth int    `json:"depth,omitempty"`
}

func serveListFiles(ctx context.Context, s *Service, call PeerCall, a listArgs, _ outputFunc) (*FileList, error) {
	if a.Depth > 0 {
		return s.ListDir(ctx, call.SessionID, call.Owner, a.Path, a.Depth)
	}
	return s.ListFiles(ctx, call.SessionID, call.Owner, a.Path)
}

// deleteArgs: EmptyDir removes Path only if it is an empty directory (a
// failed upload's clean-up).
type deleteArgs struct {
	Path     string `json:"path,omitempty"`
	EmptyDir bool   `json:"empty_dir,omitempty"`
}

func serveDeleteFile(ctx context.Context, s *Service, call PeerCall, a deleteArgs, _ outputFunc) (struct{}, error) {
	if a.EmptyDir {
		return struct{}{}, s.removeEmptyDir(call.SessionID, call.Owner, a.Path)
	}
	return struct{}{}, s.DeleteFile(ctx, call.SessionID, call.Owner, a.Path)
}

func serveStatFile(ctx context.Context, s *Service, call PeerCall, a pathArgs, _ outputFunc) (*FileInfo, error) {
	return s.StatFile(ctx, call.SessionID, call.Owner, a.Path)
}

func serveMakeDir(ctx context.Context, s *Service, call PeerCall, a pathArgs, _ outputFunc) (bool, error) {
	return s.MakeDir(ctx, call.SessionID, call.Owner, a.Path)
}

// moveArgs move Path to To.
type moveArgs struct {
	Path string `json:"path,omitempty"`
	To   string `json:"to,omitempty"`
}

func serveMoveFile(ctx context.Context, s *Service, call PeerCall, a moveArgs, _ outputFunc) (*FileInfo, error) {
	return s.MoveFile(ctx, call.SessionID, call.Owner, a.Path, a.To)
}
