package scenarios_test

import (
	"context"
	"net/url"
)

// logs reads a session's log: REST's GET /sessions/{id}/logs, MCP's
// session_logs, E2B's GET /v2/sandboxes/{id}/logs; level= the least
// severe level read.
func (p *player) logs(ctx context.Context, st step) string {
	key := st.args["key"]
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	q := url.Values{}
	if level := st.args["level"]; level != "" {
		q.Set("level", level)
	}
	switch p.on {
	case "rest":
		answer, _ := p.call(ctx, "GET", p.rest+"/sessions/"+url.PathEscape(id)+"/logs?"+q.Encode(), nil, bearer(key))
		return answer
	case "mcp":
		args := map[string]any{"session_id": id}
		if level := st.args["level"]; level != "" {
			args["level"] = level
		}
		answer, _ := p.tool(ctx, key, "session_logs", args)
		return answer
	}
	answer, _ := p.call(ctx, "GET", p.e2b+"/v2/sandboxes/"+url.PathEscape(id)+"/logs?"+q.Encode(), nil, apiKey(key))
	return answer
}
