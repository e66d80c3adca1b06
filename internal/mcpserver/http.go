package mcpserver

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// deleteGrace bounds how long DELETE /mcp lets the answers of the calls
// it canceled go out before the SDK closes the session.
const deleteGrace = 5 * time.Second

// postHeader carries, from streamableHandler to the calls' middleware
// (the SDK gives a handler its POST's header), the POST a call came in.
const postHeader = "Codecage-Mcp-Post"

var postSeq atomic.Uint64

// streamableHandler is the SDK's streamable handler with DELETE /mcp
// ending the session's calls first (the SDK's close would wait for them,
// then send them nothing).
type streamableHandler struct {
	inner http.Handler
	calls *calls
	posts *posts
}

func (h *streamableHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		// The SDK answers a POST's calls on that POST only, and does not
		// end them when its client goes (a client that cancels often
		// closes the request before its notifications/cancelled is read):
		// a call still running when the POST's handler returns has no one
		// to answer, so it is ended. Set here, never taken from the client.
		post := strconv.FormatUint(postSeq.Add(1), 10)
		r.Header.Set(postHeader, post)
		defer h.calls.cancelAll(mcpPostKey(post), errRequestGone)
	}
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
// sseWriter (bounded per client, restoring the client's ids), and the
// client's calls canceled when its stream ends or it is dropped.
type sseHandler struct {
	inner http.Handler
	calls *calls
	ids   *idSessions // each stream's id map, by its session id
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
	ids := &sseStreamIDs{sessions: h.ids, ids: newIDMap()}
	defer ids.close()
	sw := newSSEWriter(w, func(reason error) {
		h.log.Warn("mcp sse: client dropped", "remote", r.RemoteAddr, "reason", reason.Error())
		cancel(errClientGone)
	}, ids.rewrite)
	h.inner.ServeHTTP(sw, r.WithContext(ctx))
	sw.close()
}

func callerUser(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		return ti.UserID
	}
	return ""
}
