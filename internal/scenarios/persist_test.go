package scenarios_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The persistence steps (pause, resume, snapshot, fork, and a session from
// a snapshot), each the way the surface does it: REST's routes, MCP's
// tools, and E2B's as its SDK sends them (pause, v2 connect, snapshots,
// create with the snapshot as the template, fork).

// resolve is the id a step's argument names: a placeholder an earlier
// step gave ($s, $t, $snap, $f1...), else the argument itself.
func (p *player) resolve(arg string) string {
	if id, ok := p.ids[arg]; ok {
		return id
	}
	return arg
}

// name gives id a placeholder, for the answers and the later steps.
func (p *player) name(id, placeholder string) {
	p.names[id], p.ids[placeholder] = placeholder, id
}

func (p *player) persist(ctx context.Context, st step) string {
	key := st.args["key"]
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	path := url.PathEscape(id)
	switch st.op {
	case "pause":
		keep := st.args["keep_memory"] != "no"
		switch p.on {
		case "rest":
			body := "{}"
			if !keep {
				body = `{"keep_memory": false}`
			}
			answer, _ := p.call(ctx, "POST", p.rest+"/sessions/"+path+"/pause", []byte(body), bearer(key))
			return answer
		case "mcp":
			args := map[string]any{"session_id": id}
			if !keep {
				args["keep_memory"] = false
			}
			answer, _ := p.tool(ctx, key, "pause_session", args)
			return answer
		}
		body := "{}" // what the JS SDK 2.51 sends for pause()
		if !keep {
			body = `{"memory": false}`
		}
		answer, _ := p.call(ctx, "POST", p.e2b+"/sandboxes/"+path+"/pause", []byte(body), apiKey(key))
		return answer
	case "resume":
		switch p.on {
		case "rest":
			answer, _ := p.call(ctx, "POST", p.rest+"/sessions/"+path+"/resume", nil, bearer(key))
			return answer
		case "mcp":
			answer, _ := p.tool(ctx, key, "resume_session", map[string]any{"session_id": id})
			return answer
		}
		answer, _ := p.call(ctx, "POST", p.e2b+"/v2/sandboxes/"+path+"/connect", []byte("{}"), apiKey(key))
		return answer
	case "snapshot":
		return p.snapshot(ctx, key, id, st.args["name"])
	}
	return p.fork(ctx, key, id, st.args["count"])
}

func (p *player) snapshot(ctx context.Context, key, id, name string) string {
	args := map[string]any{}
	if name != "" {
		args["name"] = name
	}
	body, _ := json.Marshal(args)
	var answer, snap string
	switch p.on {
	case "rest":
		var m map[string]any
		answer, m = p.call(ctx, "POST", p.rest+"/sessions/"+url.PathEscape(id)+"/snapshots", body, bearer(key))
		snap, _ = m["snapshot_id"].(string)
	case "mcp":
		args["session_id"] = id
		var res *mcp.CallToolResult
		answer, res = p.tool(ctx, key, "snapshot_session", args)
		snap, _ = structuredOf(res)["snapshot_id"].(string)
	default:
		var m map[string]any
		answer, m = p.call(ctx, "POST", p.e2b+"/sandboxes/"+url.PathEscape(id)+"/snapshots", body, apiKey(key))
		snap, _ = m["snapshotID"].(string)
	}
	if snap == "" {
		return answer
	}
	p.name(snap, "$snap")
	return strings.ReplaceAll(answer, snap, "$snap")
}

// openFrom opens a session from a snapshot.
func (p *player) openFrom(ctx context.Context, on, key, snap string) (answer, id string) {
	switch on {
	case "rest":
		var m map[string]any
		answer, m = p.call(ctx, "POST", p.rest+"/sessions", []byte(`{"from_snapshot": `+rawJSON(snap)+`}`), bearer(key))
		id, _ = m["session_id"].(string)
	case "mcp":
		var res *mcp.CallToolResult
		answer, res = p.tool(ctx, key, "create_session", map[string]any{"from_snapshot": snap})
		id, _ = structuredOf(res)["session_id"].(string)
	default: // the SDK's Sandbox.create(snapshotId): the snapshot is the template
		var m map[string]any
		answer, m = p.call(ctx, "POST", p.e2b+"/v2/sandboxes", []byte(`{"templateID": `+rawJSON(snap)+`}`), apiKey(key))
		id, _ = m["sandboxID"].(string)
		if token, _ := m["envdAccessToken"].(string); id != "" {
			p.tokens[id+" "+key] = token
		}
	}
	if id != "" {
		p.opened = append(p.opened, opened{on, key, id})
	}
	return answer, id
}

// fork makes count copies; they are $f1, $f2... in the answer's order.
func (p *player) fork(ctx context.Context, key, id, count string) string {
	n, err := strconv.Atoi(count)
	if err != nil {
		return fmt.Sprintf("count=%q is not a number", count)
	}
	var answer string
	var copies []string
	switch p.on {
	case "rest":
		var m map[string]any
		answer, m = p.call(ctx, "POST", p.rest+"/sessions/"+url.PathEscape(id)+"/fork", []byte(fmt.Sprintf(`{"count": %d}`, n)), bearer(key))
		copies = forkIDs(m["sessions"], "session", "session_id")
	case "mcp":
		var res *mcp.CallToolResult
		answer, res = p.tool(ctx, key, "fork_session", map[string]any{"session_id": id, "count": n})
		copies = forkIDs(structuredOf(res)["sessions"], "session", "session_id")
	default:
		// The answer is an array, which call does not decode: read it here.
		answer, _ = p.call(ctx, "POST", p.e2b+"/sandboxes/"+url.PathEscape(id)+"/fork", []byte(fmt.Sprintf(`{"count": %d}`, n)), apiKey(key))
		copies = e2bForks(answer)
	}
	for i, c := range copies {
		if c == "" {
			continue
		}
		p.opened = append(p.opened, opened{p.on, key, c})
		p.name(c, fmt.Sprintf("$f%d", i+1))
		answer = strings.ReplaceAll(answer, c, fmt.Sprintf("$f%d", i+1))
	}
	return answer
}

// forkIDs reads each copy's id from a list of {outer: {field: id}}.
func forkIDs(list any, outer, field string) []string {
	items, _ := list.([]any)
	ids := make([]string, len(items))
	for i, it := range items {
		m, _ := it.(map[string]any)
		inner, _ := m[outer].(map[string]any)
		ids[i], _ = inner[field].(string)
	}
	return ids
}

// e2bForks reads the copies of an E2B fork from its rendered answer (the
// status line, then the JSON array with the tokens masked): the ids only;
// their tokens come from a connect when a step needs one.
func e2bForks(answer string) []string {
	_, body, _ := strings.Cut(answer, "\n")
	var list []any
	if json.Unmarshal([]byte(body), &list) != nil {
		return nil
	}
	return forkIDs(list, "sandbox", "sandboxID")
}

func structuredOf(res *mcp.CallToolResult) map[string]any {
	if res == nil {
		return nil
	}
	b, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}
