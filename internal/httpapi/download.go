package httpapi

import (
	"context"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/codecage/codecage/internal/frontdoor"
	"github.com/codecage/codecage/internal/service"
)

// ReadFileInput is GET /sessions/{id}/files/content (and /files/raw).
type ReadFileInput struct {
	ID     string `path:"id" doc:"The session's id."`
	Path   string `query:"path" doc:"A path as the session's code sees it: relative to the workspace (data.csv), or absolute: under /workspace, /tmp, or the read-only system tree (/usr/lib/os-release, ...)."`
	Accept string `header:"Accept" doc:"application/json (default): a FileContent; application/octet-stream: the file's bytes, as GET /sessions/{id}/files/raw answers."`
}

// Downloads stream from the session's file through a fixed buffer, as
// the raw bytes or as a FileContent whose content is streamed too; each
// holds a transfer slot (SANDBOX_MAX_TRANSFERS) while it runs.
func (s *Server) fileDownloadRoutes() {
	contentSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(service.FileContent{}), true, "FileContent")
	bytesSchema := &huma.Schema{Type: "string", Format: "binary", Description: "The file's bytes."}
	huma.Register(s.api, huma.Operation{
		OperationID: "read-file", Method: http.MethodGet, Path: "/sessions/{id}/files/content", Tags: []string{"Files"},
		Summary: "Read a file of a session",
		Description: "Returns the file as a FileContent: its text when it is valid UTF-8 without NUL bytes, else its bytes in base64 (`encoding` says which). " +
			"With Accept: application/octet-stream, the raw bytes instead. Either streams from the file, whatever its size.",
		Responses: map[string]*huma.Response{"200": {Description: "The file.", Content: map[string]*huma.MediaType{
			"application/json":         {Schema: contentSchema},
			"application/octet-stream": {Schema: bytesSchema},
		}}},
		Errors: []int{400, 401, 403, 404, 429, 503},
	}, func(ctx context.Context, in *ReadFileInput) (*huma.StreamResponse, error) {
		return s.download(ctx, in, wantsRaw(in.Accept))
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "read-file-raw", Method: http.MethodGet, Path: "/sessions/{id}/files/raw", Tags: []string{"Files"},
		Summary:     "Download a file's bytes",
		Description: "Returns the file's bytes as they are (application/octet-stream, with Content-Length), streamed from the file.",
		Responses: map[string]*huma.Response{"200": {Description: "The file's bytes.", Content: map[string]*huma.MediaType{
			"application/octet-stream": {Schema: bytesSchema},
		}}},
		Errors: []int{400, 401, 403, 404, 429, 503},
	}, func(ctx context.Context, in *ReadFileInput) (*huma.StreamResponse, error) {
		return s.download(ctx, in, true)
	})
}

func (s *Server) download(ctx context.Context, in *ReadFileInput, raw bool) (*huma.StreamResponse, error) {
	d, err := s.svc.OpenFile(ctx, in.ID, owner(ctx), in.Path, !raw)
	if err != nil {
		return nil, problemFor(err)
	}
	return &huma.StreamResponse{Body: func(hc huma.Context) {
		defer d.Close()
		_, w := humago.Unwrap(hc)
		if raw {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.FormatInt(d.Info.Size, 10))
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(http.StatusOK)
		if raw {
			_, err = frontdoor.CopyOut(w, d, make([]byte, service.TransferBuffer))
		} else {
			err = service.WriteContentJSON(frontdoor.StallWriter(w), in.Path, d)
		}
		if err != nil {
			// The answer cannot be finished (the file changed, the client
			// stalled): cut the connection rather than end it as if whole.
			panic(http.ErrAbortHandler)
		}
	}}, nil
}

// wantsRaw: the client prefers application/octet-stream to JSON.
func wantsRaw(accept string) bool {
	best, bestQ := "", -1.0
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || (mt != "application/octet-stream" && mt != "application/json") {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		if q > bestQ {
			best, bestQ = mt, q
		}
	}
	return best == "application/octet-stream"
}
