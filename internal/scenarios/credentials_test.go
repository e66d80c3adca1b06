package scenarios_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
)

// credential binds a secret to a host on a session's egress: REST stores
// it (POST /secrets, as "scenario") and binds it (PUT
// /sessions/{id}/egress_credentials), MCP likewise (create_secret,
// set_session_egress_credentials), E2B gives it inline in its network
// rules (PUT /sandboxes/{id}/network). The binding is named "HOST HEADER"
// on each, as E2B's are; the answer is the binding's.
func (p *player) credential(ctx context.Context, st step) string {
	key, host, header, value := st.args["key"], st.args["host"], st.args["header"], st.args["value"]
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	binding := map[string]any{"name": host + " " + header, "secret": "scenario", "host": host, "header": header}
	switch p.on {
	case "rest":
		secret, _ := json.Marshal(map[string]any{"name": "scenario", "value": value})
		if answer, _ := p.call(ctx, "POST", p.rest+"/secrets", secret, bearer(key)); !strings.HasPrefix(answer, "201\n") {
			return "storing the secret: " + answer
		}
		body, _ := json.Marshal(map[string]any{"egress_credentials": []any{binding}})
		answer, _ := p.call(ctx, "PUT", p.rest+"/sessions/"+url.PathEscape(id)+"/egress_credentials", body, bearer(key))
		return answer
	case "mcp":
		if answer, res := p.tool(ctx, key, "create_secret", map[string]any{"name": "scenario", "value": value}); res == nil || res.IsError {
			return "storing the secret: " + answer
		}
		answer, _ := p.tool(ctx, key, "set_session_egress_credentials", map[string]any{"session_id": id, "egress_credentials": []any{binding}})
		return answer
	}
	rules := map[string]any{host: []any{map[string]any{"transform": map[string]any{"headers": map[string]string{header: value}}}}}
	body, _ := json.Marshal(map[string]any{"rules": rules})
	answer, _ := p.call(ctx, "PUT", p.e2b+"/sandboxes/"+url.PathEscape(id)+"/network", body, apiKey(key))
	return answer
}
