package e2b

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/frontdoor"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/streamwrite"
)

// envdRoutes are the daemon's: health, files over HTTP, and the Process
// and Filesystem services over the Connect protocol (JSON).
func (s *Server) envdRoutes() {
	m := s.envd
	opts := s.connectOptions()
	m.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.HandleFunc("GET /files", s.download)
	m.HandleFunc("POST /files", s.upload)
	// Each procedure behind the Connect door (body limits, client errors);
	// the process streams last as long as their process, and end when
	// their client stops reading (the process goes on: its output waits in
	// its log for a later Connect).
	perWrite := s.cfg.StreamWriteTimeout
	rpc := func(name string, h http.Handler) { m.Handle(name, s.connectDoor(h)) }
	rpc("/process.Process/Start", streaming(streamwrite.Handler(connect.NewServerStreamHandler("/process.Process/Start", s.start, opts...), perWrite)))
	rpc("/process.Process/Connect", streaming(streamwrite.Handler(connect.NewServerStreamHandler("/process.Process/Connect", s.connectProc, opts...), perWrite)))
	rpc("/process.Process/List", connect.NewUnaryHandler("/process.Process/List", s.listProcs, opts...))
	rpc("/process.Process/SendSignal", connect.NewUnaryHandler("/process.Process/SendSignal", s.signal, opts...))
	rpc("/process.Process/SendInput", connect.NewUnaryHandler("/process.Process/SendInput", s.sendInput, opts...))
	rpc("/process.Process/CloseStdin", connect.NewUnaryHandler("/process.Process/CloseStdin", s.closeStdin, opts...))
	rpc("/process.Process/Update", connect.NewUnaryHandler("/process.Process/Update", s.update, opts...))
	rpc("/filesystem.Filesystem/Stat", connect.NewUnaryHandler("/filesystem.Filesystem/Stat", s.stat, opts...))
	rpc("/filesystem.Filesystem/ListDir", connect.NewUnaryHandler("/filesystem.Filesystem/ListDir", s.listDir, opts...))
	rpc("/filesystem.Filesystem/MakeDir", connect.NewUnaryHandler("/filesystem.Filesystem/MakeDir", s.makeDir, opts...))
	rpc("/filesystem.Filesystem/Move", connect.NewUnaryHandler("/filesystem.Filesystem/Move", s.move, opts...))
	rpc("/filesystem.Filesystem/Remove", connect.NewUnaryHandler("/filesystem.Filesystem/Remove", s.remove, opts...))
	rpc("/filesystem.Filesystem/WatchDir", streaming(streamwrite.Handler(connect.NewServerStreamHandler("/filesystem.Filesystem/WatchDir", s.watchDir, opts...), perWrite)))
	rpc("/filesystem.Filesystem/CreateWatcher", connect.NewUnaryHandler("/filesystem.Filesystem/CreateWatcher", s.createWatcher, opts...))
	rpc("/filesystem.Filesystem/GetWatcherEvents", connect.NewUnaryHandler("/filesystem.Filesystem/GetWatcherEvents", s.getWatcherEvents, opts...))
	rpc("/filesystem.Filesystem/RemoveWatcher", connect.NewUnaryHandler("/filesystem.Filesystem/RemoveWatcher", s.removeWatcher, opts...))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Connect reads a JSON body's code: unimplemented, not "not found".
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"code":"unimplemented","message":%q}`, "codecage's sandbox daemon does not implement "+r.URL.Path)
	})
}

// sandboxPath is p as the service takes it: "~" is the home.
func sandboxPath(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return Home + strings.TrimPrefix(p, "~")
	}
	return p
}

// entry describes a file of the sandbox as E2B's EntryInfo: the service
// names a file of the workspace relative to it, any other absolutely.
func entry(fi *service.FileInfo) *wire.EntryInfo {
	p := Home
	switch {
	case strings.HasPrefix(fi.Path, "/"):
		p = fi.Path
	case fi.Path != "." && fi.Path != "":
		p = Home + "/" + fi.Path
	}
	owner := "user"
	if p != Home && !strings.HasPrefix(p, Home+"/") && p != "/tmp" && !strings.HasPrefix(p, "/tmp/") {
		owner = "root" // the read-only system tree
	}
	mode := fs.FileMode(fi.Mode)
	switch {
	case fi.Symlink:
		mode |= fs.ModeSymlink
	case fi.Dir:
		mode |= fs.ModeDir
	}
	// The mode is the permission bits only, as envd's (a directory is
	// 0o755, not Go's ModeDir|0o755); the type is in Type.
	e := &wire.EntryInfo{Name: path.Base(p), Type: "FILE_TYPE_FILE", Path: p, Size: fi.Size, Mode: uint32(mode.Perm()),
		Permissions: mode.String(), Owner: owner, Group: owner, ModifiedTime: fi.Modified, Metadata: fi.Metadata}
	switch {
	case fi.Symlink:
		linkEntry(e, fi.Link)
	case fi.Dir:
		e.Type = "FILE_TYPE_DIRECTORY"
	}
	return e
}

// linkEntry describes a symlink as envd does: by where it leads (its
// resolved absolute path) and what is there (its type and permission
// bits). One that does not resolve (here: dangling, a loop, or out of the
// workspace) names itself as its target, of no type: envd's broken link.
// (FILE_TYPE_SYMLINK, which newer envds can give, is not in the enum of
// older SDKs, e2b Python 2.34's among them: their parser refuses it.)
func linkEntry(e *wire.EntryInfo, to *service.LinkEnd) {
	if to == nil {
		self := e.Path
		e.Type, e.SymlinkTarget, e.Mode = "FILE_TYPE_UNSPECIFIED", &self, 0
		return
	}
	target := to.Path
	e.Type, e.SymlinkTarget, e.Mode = "FILE_TYPE_FILE", &target, to.Mode
	if to.Dir {
		e.Type = "FILE_TYPE_DIRECTORY"
	}
}

// daemonStatus is the HTTP status of a service error in a sandbox's
// daemons (/files, /execute, contexts), as envd and the SDK read them.
func daemonStatus(err error) int { return api.StatusOf(err).Envd }

// rpcError turns a service error into a Connect error the SDK maps.
func rpcError(err error) error { return connect.NewError(api.StatusOf(err).Connect, err) }

func (s *Server) stat(ctx context.Context, req *connect.Request[wire.PathRequest]) (*connect.Response[wire.EntryResponse], error) {
	ref := sandboxOf(ctx)
	fi, err := s.svc.StatFile(ctx, ref.id, ref.owner, sandboxPath(req.Msg.Path))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&wire.EntryResponse{Entry: entry(fi)}), nil
}

func (s *Server) listDir(ctx context.Context, req *connect.Request[wire.ListDirRequest]) (*connect.Response[wire.ListDirResponse], error) {
	ref := sandboxOf(ctx)
	list, err := s.svc.ListDir(ctx, ref.id, ref.owner, sandboxPath(req.Msg.Path), max(int(req.Msg.Depth), 1))
	if err != nil {
		return nil, rpcError(err)
	}
	out := wire.ListDirResponse{Entries: make([]wire.EntryInfo, 0, len(list.Files))}
	for i := range list.Files {
		out.Entries = append(out.Entries, *entry(&list.Files[i]))
	}
	resp := connect.NewResponse(&out)
	if list.Truncated {
		// envd's ListDirResponse has entries only (an SDK would choke on, or
		// drop, another field): a truncated listing says so in a header.
		resp.Header().Set(TruncatedHeader, "true")
	}
	return resp, nil
}

// TruncatedHeader marks a ListDir answer that stopped at one of the
// listing's bounds (service.MaxListedFiles, MaxListDepth, MaxListBytes).
const TruncatedHeader = "X-Codecage-Truncated"

func (s *Server) makeDir(ctx context.Context, req *connect.Request[wire.PathRequest]) (*connect.Response[wire.EntryResponse], error) {
	ref := sandboxOf(ctx)
	p := sandboxPath(req.Msg.Path)
	created, err := s.svc.MakeDir(ctx, ref.id, ref.owner, p)
	if err != nil {
		return nil, rpcError(err)
	}
	if !created {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %s already exists", req.Msg.Path))
	}
	fi, err := s.svc.StatFile(ctx, ref.id, ref.owner, p)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&wire.EntryResponse{Entry: entry(fi)}), nil
}

func (s *Server) move(ctx context.Context, req *connect.Request[wire.MoveRequest]) (*connect.Response[wire.EntryResponse], error) {
	ref := sandboxOf(ctx)
	fi, err := s.svc.MoveFile(ctx, ref.id, ref.owner, sandboxPath(req.Msg.Source), sandboxPath(req.Msg.Destination))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&wire.EntryResponse{Entry: entry(fi)}), nil
}

func (s *Server) remove(ctx context.Context, req *connect.Request[wire.PathRequest]) (*connect.Response[wire.Empty], error) {
	ref := sandboxOf(ctx)
	// Removing what is not there succeeds, as envd's (os.RemoveAll).
	err := s.svc.DeleteFile(ctx, ref.id, ref.owner, sandboxPath(req.Msg.Path))
	if err != nil && !errors.Is(err, service.ErrFileNotFound) {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&wire.Empty{}), nil
}

// fileError answers a /files call the service refused, as envd does.
func fileError(w http.ResponseWriter, err error) {
	writeAPIError(w, daemonStatus(err), err.Error())
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	ref := sandboxOf(r.Context())
	p := r.URL.Query().Get("path")
	if p == "" {
		writeAPIError(w, http.StatusBadRequest, "the path query parameter is required")
		return
	}
	if path.Clean(p) == mcpTokenFile {
		s.serveGatewayToken(w, r, ref)
		return
	}
	d, err := s.svc.OpenFile(r.Context(), ref.id, ref.owner, sandboxPath(p), false)
	if err != nil {
		fileError(w, err)
		return
	}
	defer d.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(d.Info.Size, 10))
	w.WriteHeader(http.StatusOK)
	// A failure now (the file shrank, the client stalled) cuts the answer
	// short of its Content-Length: the client sees it incomplete.
	_, _ = frontdoor.CopyOut(w, d, make([]byte, service.TransferBuffer))
}

// written is what envd answers for each file an upload wrote.
type written struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// metadataHeader starts the headers of an upload that carry its files'
// metadata (X-Metadata-<key>: <value>), as envd 0.6.2 reads them.
const metadataHeader = "X-Metadata-"

// uploadMetadata is the metadata an upload's headers carry; keys are
// lowercased by the service, as envd does.
func uploadMetadata(h http.Header) map[string]string {
	var md map[string]string
	for name, values := range h {
		key, ok := strings.CutPrefix(name, metadataHeader)
		if !ok || key == "" || len(values) == 0 {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = values[0]
	}
	return md
}

// upload writes files: a multipart form (field "file", the filename is
// where the file goes, or the path query for a single one) or a raw body
// for the path query, gzipped or not. Each file streams to disk; the
// upload is all or nothing (service.Upload): a failure part-way leaves
// the workspace as it was.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	ref := sandboxOf(r.Context())
	limit := s.cfg.MaxFileSize
	r.Body = http.MaxBytesReader(w, r.Body, 2*limit+1<<20)
	target := r.URL.Query().Get("path")
	up, err := s.svc.BeginUpload(r.Context(), ref.id, ref.owner)
	if err != nil {
		fileError(w, err)
		return
	}
	defer up.Close()
	if err := up.SetMetadata(uploadMetadata(r.Header)); err != nil {
		fileError(w, err)
		return
	}
	add := func(p string, body io.Reader) error { return up.Add(sandboxPath(p), body) }
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case mt == "multipart/form-data":
		err = s.uploadParts(multipart.NewReader(r.Body, params["boundary"]), target, add)
	case target == "":
		err = fmt.Errorf("%w: the path query parameter is required for a raw upload", service.ErrInvalidRequest)
	default:
		body := io.Reader(r.Body)
		if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
			zr, zerr := gzip.NewReader(r.Body)
			if zerr != nil {
				err = fmt.Errorf("%w: the body is not gzip: %v", service.ErrInvalidRequest, zerr)
				break
			}
			defer zr.Close()
			body = zr
		}
		err = add(target, body)
	}
	var files []service.FileInfo
	if err == nil {
		files, err = up.Commit()
	}
	if err != nil {
		fileError(w, err)
		return
	}
	out := make([]written, 0, len(files))
	for i := range files {
		e := entry(&files[i])
		out = append(out, written{Name: e.Name, Type: "file", Path: e.Path, Metadata: e.Metadata})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) uploadParts(mr *multipart.Reader, target string, write func(string, io.Reader) error) error {
	n := 0
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, service.ErrShuttingDown) { // the drain cut the body
			return err
		}
		if err != nil {
			return fmt.Errorf("%w: the multipart body: %v", service.ErrInvalidRequest, err)
		}
		if part.FormName() != "file" {
			continue
		}
		// Not part.FileName(): that keeps the base name only, and the
		// filename here is where the file goes.
		_, disp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		p := disp["filename"]
		if target != "" && n == 0 {
			p = target
		}
		if p == "" {
			return fmt.Errorf("%w: a file part has no filename and there is no path query parameter", service.ErrInvalidRequest)
		}
		n++
		if err := write(p, part); err != nil {
			return err
		}
	}
	if n == 0 {
		return fmt.Errorf("%w: the form holds no \"file\" part", service.ErrInvalidRequest)
	}
	return nil
}
