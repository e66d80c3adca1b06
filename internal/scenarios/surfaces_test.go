package scenarios_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/leftovers"
)

// player plays one scenario's steps on one surface.
type player struct {
	*env
	t       *testing.T
	on      string
	s       string                 // the session a "session" step opened ($s)
	names   map[string]string      // ids the answers show by a placeholder
	ids     map[string]string      // placeholder -> id, for the steps' arguments
	tokens  map[string]string      // E2B: "id key" -> the sandbox's access token
	boxes   map[string]string      // E2B: key -> the sandbox its code runs in when no session is named
	pids    map[string]uint32      // E2B: $p -> the pid its process started with
	streams map[string]*openStream // E2B: process streams a wait has yet to read
	opened  []opened
}

type opened struct{ on, key, id string }

func (p *player) do(ctx context.Context, st step) string {
	key := st.args["key"]
	switch st.op {
	case "session":
		on := cmp.Or(st.args["on"], p.on)
		var answer, id string
		if from := st.args["from"]; from != "" {
			answer, id = p.openFrom(ctx, on, key, p.resolve(from))
		} else {
			answer, id = p.openSession(ctx, on, key, st.args["environment"], st.args["machine"] == "true")
		}
		if id != "" {
			as := cmp.Or(st.args["as"], "$s")
			if as == "$s" {
				p.s = id
			}
			p.name(id, as)
			answer = strings.ReplaceAll(answer, id, as)
		}
		if on != p.on {
			answer = "(on " + on + ")\n" + answer
		}
		return answer
	case "execute":
		id, environment := p.resolve(st.args["session"]), st.args["environment"]
		if id == "" && p.on == "e2b" { // E2B runs code in a sandbox only: one of the environment's template
			if answer := p.box(ctx, key, environment); answer != "" {
				return "opening a sandbox to run in: " + answer
			}
			id = p.boxes[key+" "+environment]
		}
		if st.args["cancel"] == "yes" {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			go func() { // a client that gives up once its run's code sleeps
				for deadline := time.Now().Add(cancelWithin); !codeSleeps() && ctx.Err() == nil && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
				cancel()
			}()
		}
		if st.args["context"] != "" {
			p.onlyE2B(st)
		}
		return p.execute(ctx, key, id, st.args["code"], st.args["language"], environment, p.resolve(st.args["context"]))
	case "list":
		return p.list(ctx, key)
	case "idle":
		return p.idle()
	case "write":
		return p.write(ctx, st)
	case "read":
		return p.read(ctx, st)
	case "command":
		return p.command(ctx, st)
	case "pause", "resume", "snapshot", "fork":
		return p.persist(ctx, st)
	case "logs":
		return p.logs(ctx, st)
	case "network":
		return p.network(ctx, st)
	case "credential":
		return p.credential(ctx, st)
	case "spawn":
		return p.spawn(ctx, st)
	case "connect":
		return p.connect(ctx, st)
	case "wait":
		return p.wait(ctx, st)
	case "processes", "input", "closestdin", "signal":
		return p.processRPC(ctx, st)
	case "context", "contexts", "removecontext", "restartcontext":
		return p.codeContext(ctx, st)
	}
	return "unknown step"
}

// openSession opens a session as key, in environment ("": none; on E2B,
// the code interpreter's template, else the environment's name as the
// template, as the SDK's Sandbox.create(name) sends it).
// openSession opens a session on surface on; machine asks REST and MCP
// for a machine session (every E2B sandbox is one where the server
// offers them).
func (p *player) openSession(ctx context.Context, on, key, environment string, machine bool) (answer, id string) {
	var body map[string]any
	args := map[string]any{}
	if environment != "" {
		args["environment"] = environment
	}
	if machine {
		args["machine"] = true
	}
	switch on {
	case "rest":
		req, _ := json.Marshal(args)
		answer, body = p.call(ctx, "POST", p.rest+"/sessions", req, bearer(key))
		id, _ = body["session_id"].(string)
	case "mcp":
		var res *mcp.CallToolResult
		answer, res = p.tool(ctx, key, "create_session", args)
		if res != nil {
			m, _ := res.StructuredContent.(map[string]any)
			id, _ = m["session_id"].(string)
		}
	case "e2b":
		template := cmp.Or(environment, "code-interpreter-v1")
		answer, body = p.call(ctx, "POST", p.e2b+"/sandboxes", []byte(`{"templateID": `+rawJSON(template)+`}`), apiKey(key))
		id, _ = body["sandboxID"].(string)
		if token, _ := body["envdAccessToken"].(string); id != "" {
			p.tokens[id+" "+key] = token
		}
	default:
		p.t.Fatalf("no surface %q", on)
	}
	if id != "" {
		p.opened = append(p.opened, opened{on, key, id})
	}
	return answer, id
}

func (p *player) execute(ctx context.Context, key, session, code, language, environment, codeContext string) string {
	body := `{"code": ` + rawJSON(code)
	if codeContext != "" { // E2B's alone: runCode(code, {context})
		body += `, "context_id": ` + rawJSON(codeContext)
	}
	if language != "" { // the same field on every surface
		body += `, "language": ` + rawJSON(language)
	}
	switch p.on {
	case "rest", "mcp":
		if environment != "" { // a stateless run's; on E2B, the sandbox's template
			body += `, "environment": ` + rawJSON(environment)
		}
		if session != "" {
			body += `, "session_id": ` + rawJSON(session)
		}
		body += "}"
		if p.on == "mcp" {
			answer, _ := p.tool(ctx, key, "execute_code", json.RawMessage(body))
			return answer
		}
		answer, _ := p.call(ctx, "POST", p.rest+"/execute", []byte(body), bearer(key))
		return answer
	}
	token, failed := p.token(ctx, key, session)
	if failed != "" {
		return failed
	}
	answer, _ := p.call(ctx, "POST", p.e2b+"/execute", []byte(body+"}"),
		map[string]string{"E2b-Sandbox-Id": session, "E2b-Sandbox-Port": "49999", "X-Access-Token": token})
	return answer
}

// box opens the sandbox a key's E2B code runs in when a step names none
// (one per environment it names, of that template), unseen in the
// answers; it returns the answer when that fails.
func (p *player) box(ctx context.Context, key, environment string) string {
	if p.boxes[key+" "+environment] != "" {
		return ""
	}
	answer, id := p.openSession(ctx, "e2b", key, environment, false)
	if id == "" {
		return answer
	}
	p.boxes[key+" "+environment], p.names[id] = id, "$box"
	return ""
}

func (p *player) list(ctx context.Context, key string) string {
	switch p.on {
	case "rest":
		answer, _ := p.call(ctx, "GET", p.rest+"/sessions", nil, bearer(key))
		return answer
	case "mcp":
		answer, _ := p.tool(ctx, key, "list_sessions", map[string]any{})
		return answer
	}
	answer, _ := p.call(ctx, "GET", p.e2b+"/v2/sandboxes", nil, apiKey(key))
	return answer
}

// idle judges from outside the run, by the service's counters that
// /metrics exports (sandbox_requests_running, sandbox_budget_in_use).
func (p *player) idle() string {
	deadline := time.Now().Add(idleWithin)
	for {
		running, sandboxes, sessions := p.svc.Running(), p.svc.Budget().InUse, p.svc.SessionCount()
		if running == 0 && sandboxes <= sessions {
			return "idle: no run holds a slot, no sandbox beyond the open sessions'"
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("busy after %v: %d runs hold a slot, %d sandboxes for %d sessions", idleWithin, running, sandboxes, sessions)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *player) closeAll() {
	p.closeStreams()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, o := range p.opened {
		switch o.on {
		case "rest":
			p.call(ctx, "DELETE", p.rest+"/sessions/"+o.id, nil, bearer(o.key))
		case "mcp":
			p.tool(ctx, o.key, "close_session", map[string]any{"session_id": o.id})
		case "e2b":
			p.call(ctx, "DELETE", p.e2b+"/sandboxes/"+o.id, nil, apiKey(o.key))
		}
	}
}

func bearer(key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + keys[key]}
}
func apiKey(key string) map[string]string { return map[string]string{"X-API-KEY": keys[key]} }

// call makes one HTTP request and renders its answer: the status, then
// the body normalized (an NDJSON body line by line). A JSON object body
// is returned too.
func (p *player) call(ctx context.Context, method, url string, body []byte, header map[string]string) (string, map[string]any) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return p.failed(err), nil
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return p.failed(err), nil
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
		var lines []string
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			lines = append(lines, p.normalize([]byte(line), false))
		}
		return fmt.Sprintf("%d\n%s\n", resp.StatusCode, strings.Join(lines, "\n")), m
	}
	return fmt.Sprintf("%d\n%s\n", resp.StatusCode, p.normalize(raw, true)), m
}

// tool calls an MCP tool through the official client, as key.
func (p *player) tool(ctx context.Context, key, name string, args any) (string, *mcp.CallToolResult) {
	cs := p.mcp[key]
	if cs == nil {
		client := mcp.NewClient(&mcp.Implementation{Name: "scenarios", Version: "1"}, nil)
		hc := &http.Client{Transport: headers{bearer(key)}}
		var err error
		cs, err = client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.rest + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
		if err != nil {
			p.t.Fatalf("MCP as %s: %v", key, err)
		}
		p.mcp[key] = cs
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return p.failed(err), nil
	}
	res.Meta = nil // the server's name and version
	b, _ := json.Marshal(res)
	return p.normalize(b, true) + "\n", res
}

// failed renders a request that got no answer.
func (p *player) failed(err error) string {
	if errors.Is(err, context.Canceled) {
		return "(no answer: the client cancelled)"
	}
	return "error: " + p.replace(err.Error())
}

// headers adds fixed headers to every request.
type headers struct{ h map[string]string }

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// codeSleeps says whether a sandbox of this process waits in a sleep, as
// the host sees it (its wchan): the cancelled run's code has started.
func codeSleeps() bool {
	for _, p := range leftovers.SandboxProcesses() {
		pid, _, _ := strings.Cut(p, " ")
		if b, err := os.ReadFile("/proc/" + pid + "/wchan"); err == nil &&
			(strings.Contains(string(b), "hrtimer") || strings.Contains(string(b), "nanosleep")) {
			return true
		}
	}
	return false
}
