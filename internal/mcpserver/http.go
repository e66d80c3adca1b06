package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// deleteGrace bounds how long DELETE /mcp lets the answers of the calls
// it canceled go out before the SDK closes the session.
const deleteGrace = 5 * time.Second

// streamableHandler is the SDK's streamable handler with DELETE /mcp
// ending the session's calls first (the SDK's close would wait for them,
// then send them nothing).
type streamableHandler struct {
	inner http.Handler
	calls *calls
	posts *posts
}

func (h *streamableHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get("Mcp-Session-Id")
	if sid != "" {
		switch r.Method {
		case http.MethodPost:
			defer h.posts.start(sid)()
		case http.MethodDelete:
			user := ""
			if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
				user = ti.UserID
			}
			if h.calls.cancel(mcpSessionKey(sid), user, errSessionDeleted) > 0 {
				h.posts.wait(sid, deleteGrace)
			}
		}
	}
	h.inner.ServeHTTP(w, r)
}

// sseHandler is the SDK's legacy SSE handler with each stream behind an
// sseWriter (bounded per client), and the client's calls canceled when its
// stream ends or it is dropped.
type sseHandler struct {
	inner http.Handler
	calls *calls
	log   *slog.Logger
}

func (h *sseHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		h.inner.ServeHTTP(w, r)
		return
	}
	client := &sseClient{}
	ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), sseClientKey{}, client))
	defer cancel(errClientGone)
	stop := context.AfterFunc(ctx, func() { h.calls.cancel(client, callerUser(r), errClientGone) })
	defer stop()
	sw := newSSEWriter(w, func(reason error) {
		h.log.Warn("mcp sse: client dropped", "remote", r.RemoteAddr, "reason", reason.Error())
		cancel(errClientGone)
	})
	h.inner.ServeHTTP(sw, r.WithContext(ctx))
	sw.close()
}

func callerUser(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		return ti.UserID
	}
	return ""
}

// checkBodies answers, before the SDK reads them, POSTed frames the SDK
// would change or fail on: a call whose numeric id it cannot give back
// exactly (it decodes ids through float64) is refused with -32600 naming
// the id, and a malformed frame gets a JSON-RPC error rather than the
// SDK's plain-text 400. Batches go to the SDK, their ids checked.
func checkBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			next.ServeHTTP(w, r)
			return
		}
		limit := int64(mcp.DefaultMaxRequestBodyBytes)
		data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
		if err != nil || int64(len(data)) > limit {
			// Too large or unreadable: the SDK says so, from what is left.
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(data), r.Body))
			next.ServeHTTP(w, r)
			return
		}
		if bad := checkPosted(data); bad != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(errorFrame(bad.id, bad.err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		next.ServeHTTP(w, r)
	})
}

func checkPosted(data []byte) *frameError {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' && withinDepth(trimmed, maxFrameDepth) {
		var batch []json.RawMessage
		if json.Unmarshal(trimmed, &batch) != nil {
			return nil // the SDK answers
		}
		for _, m := range batch {
			var f struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(m, &f) == nil && f.ID != nil && !exactID(f.ID) {
				return inexactID(f.ID)
			}
		}
		return nil
	}
	f, bad := checkFrame(trimmed)
	if bad != nil {
		return bad
	}
	if f.isCall && !exactID(f.id) {
		return inexactID(f.id)
	}
	return nil
}

func inexactID(id json.RawMessage) *frameError {
	return refuse(nil, jsonrpc.CodeInvalidRequest,
		"invalid request: id %s cannot be answered exactly over HTTP; use a string or an integer between -2^53 and 2^53", quoteID(id))
}
