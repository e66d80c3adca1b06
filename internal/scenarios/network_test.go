package scenarios_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
)

// network replaces a session's egress rules: REST's PUT
// /sessions/{id}/network, MCP's set_session_network, E2B's PUT
// /sandboxes/{id}/network (updateNetwork); allow= and deny= are
// comma-separated.
func (p *player) network(ctx context.Context, st step) string {
	key := st.args["key"]
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	list := func(name string) []string {
		if v := st.args[name]; v != "" {
			return strings.Split(v, ",")
		}
		return nil
	}
	allow, deny := list("allow"), list("deny")
	switch p.on {
	case "rest":
		body, _ := json.Marshal(map[string]any{"allow_out": allow, "deny_out": deny})
		answer, _ := p.call(ctx, "PUT", p.rest+"/sessions/"+url.PathEscape(id)+"/network", body, bearer(key))
		return answer
	case "mcp":
		answer, _ := p.tool(ctx, key, "set_session_network", map[string]any{"session_id": id, "allow_out": allow, "deny_out": deny})
		return answer
	}
	body, _ := json.Marshal(map[string]any{"allowOut": allow, "denyOut": deny})
	answer, _ := p.call(ctx, "PUT", p.e2b+"/sandboxes/"+url.PathEscape(id)+"/network", body, apiKey(key))
	return answer
}
