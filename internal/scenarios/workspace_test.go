package scenarios_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
)

// The workspace steps: files and commands, each the way the surface does
// it (REST's file routes and /commands, MCP's tools, E2B's envd: /files
// and process.Process/Start over Connect). A step without session= uses
// $s on REST and MCP (their files belong to a session) and the key's
// sandbox on E2B.

// sessionOf is the session a workspace step works in.
func (p *player) sessionOf(ctx context.Context, st step) (id, failed string) {
	id = p.resolve(st.args["session"])
	if id == "" {
		id = p.s
	}
	if p.on == "e2b" && id == "" {
		if answer := p.box(ctx, st.args["key"], ""); answer != "" {
			return "", "opening a sandbox to work in: " + answer
		}
		id = p.boxes[st.args["key"]+" "]
	}
	return id, ""
}

func (p *player) write(ctx context.Context, st step) string {
	key, path, content := st.args["key"], st.args["path"], st.args["content"]
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	switch p.on {
	case "rest":
		body := `{"path": ` + rawJSON(path) + `, "content": ` + rawJSON(content) + `}`
		answer, _ := p.call(ctx, "PUT", p.rest+"/sessions/"+url.PathEscape(id)+"/files/content", []byte(body), bearer(key))
		return answer
	case "mcp":
		answer, _ := p.tool(ctx, key, "write_file", json.RawMessage(`{"session_id": `+rawJSON(id)+`, "path": `+rawJSON(path)+`, "content": `+rawJSON(content)+`}`))
		return answer
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", path)
	_, _ = io.WriteString(fw, content)
	_ = mw.Close()
	h, failed := p.envd(ctx, key, id)
	if failed != "" {
		return failed
	}
	h["Content-Type"] = mw.FormDataContentType()
	answer, _ := p.call(ctx, "POST", p.e2b+"/files?path="+url.QueryEscape(path), form.Bytes(), h)
	return answer
}

func (p *player) read(ctx context.Context, st step) string {
	key, path := st.args["key"], st.args["path"]
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	switch p.on {
	case "rest":
		answer, _ := p.call(ctx, "GET", p.rest+"/sessions/"+url.PathEscape(id)+"/files/content?path="+url.QueryEscape(path), nil, bearer(key))
		return answer
	case "mcp":
		answer, _ := p.tool(ctx, key, "read_file", map[string]any{"session_id": id, "path": path})
		return answer
	}
	h, failed := p.envd(ctx, key, id)
	if failed != "" {
		return failed
	}
	answer, _ := p.call(ctx, "GET", p.e2b+"/files?path="+url.QueryEscape(path), nil, h)
	return answer
}

func (p *player) command(ctx context.Context, st step) string {
	key, cmd, user := st.args["key"], st.args["cmd"], st.args["user"]
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	switch p.on {
	case "rest", "mcp":
		body := `{"command": ` + rawJSON(cmd)
		if id != "" {
			body += `, "session_id": ` + rawJSON(id)
		}
		if user != "" {
			body += `, "user": ` + rawJSON(user)
		}
		body += "}"
		if p.on == "mcp" {
			answer, _ := p.tool(ctx, key, "run_command", json.RawMessage(body))
			return answer
		}
		answer, _ := p.call(ctx, "POST", p.rest+"/commands", []byte(body), bearer(key))
		return answer
	}
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmd}}})
	resp, failed := p.streamAs(ctx, key, id, user, "Start", msg)
	if resp == nil {
		return failed
	}
	defer resp.Body.Close()
	return fmt.Sprintf("%d\n%s", resp.StatusCode, p.events(resp.Body))
}

// stream opens one of envd's process streams (Start, Connect) of sandbox
// id with msg, as the SDK's Connect client does; without a response, it
// returns why.
func (p *player) stream(ctx context.Context, key, id, method string, msg []byte) (*http.Response, string) {
	return p.streamAs(ctx, key, id, "", method, msg)
}

// streamAs is stream as user ("": the default), named as the SDKs name
// it: Basic authentication, the user and an empty password.
func (p *player) streamAs(ctx context.Context, key, id, user, method string, msg []byte) (*http.Response, string) {
	h, failed := p.envd(ctx, key, id)
	if failed != "" {
		return nil, failed
	}
	if user != "" {
		h["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
	}
	h["Content-Type"], h["Connect-Protocol-Version"] = "application/connect+json", "1"
	req, err := http.NewRequestWithContext(ctx, "POST", p.e2b+"/process.Process/"+method, bytes.NewReader(frame(0, msg)))
	if err != nil {
		p.t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, p.failed(err)
	}
	return resp, ""
}

// events renders a Connect stream of process events a line each, to
// its end. Output is a byte stream, cut into data events wherever the
// process's writes and the reads happened to fall: a run of data events
// of one stream is one line, as the SDK's handle.wait() joins them.
func (p *player) events(r io.Reader) string {
	var out strings.Builder
	var data *shownEvent // the run of data events not yet written
	for {
		evs, tail, _, done := p.nextEvent(r)
		for _, ev := range evs {
			if data != nil && !data.join(ev) {
				out.WriteString(p.render(*data))
				data = nil
			}
			switch {
			case data != nil:
			case ev.kind == "data":
				data = &ev
			default:
				out.WriteString(p.render(ev))
			}
		}
		if done {
			if data != nil {
				out.WriteString(p.render(*data))
			}
			return out.String() + tail
		}
	}
}

// shownEvent is one process event as a scenario shows it: its kind and
// fields, the output decoded from base64 so that it reads as text.
type shownEvent struct {
	kind   string
	fields map[string]any
}

// join adds ev to e, both data of one stream (and nothing else), and says
// whether it did.
func (e *shownEvent) join(ev shownEvent) bool {
	if ev.kind != "data" || len(ev.fields) != 1 || len(e.fields) != 1 {
		return false
	}
	for stream, more := range ev.fields {
		have, ok := e.fields[stream].(string)
		text, isText := more.(string)
		if !ok || !isText {
			return false
		}
		e.fields[stream] = have + text
	}
	return true
}

func (p *player) render(e shownEvent) string {
	b, _ := json.Marshal(e.fields)
	return e.kind + " " + p.normalize(b, false) + "\n"
}

// nextEvent reads the next message of a Connect stream of process
// events: its events, or (done) the stream's end or break as tail; pid
// is a start event's process.
func (p *player) nextEvent(r io.Reader) (evs []shownEvent, tail string, pid uint32, done bool) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if err != io.EOF {
			return nil, "(stream broke: " + err.Error() + ")\n", 0, true
		}
		return nil, "", 0, true
	}
	msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, "(stream broke: " + err.Error() + ")\n", 0, true
	}
	if head[0]&2 != 0 { // the end of the stream: {} or an error
		return nil, "end of stream " + p.normalize(msg, false) + "\n", 0, true
	}
	var ev struct {
		Event map[string]map[string]any `json:"event"`
	}
	_ = json.Unmarshal(msg, &ev)
	for _, kind := range []string{"start", "data", "end", "keepalive"} {
		fields, ok := ev.Event[kind]
		if !ok {
			continue
		}
		if n, ok := fields["pid"].(float64); ok {
			pid = uint32(n)
		}
		delete(fields, "pid") // a scenario names it by the step that started it
		for _, stream := range []string{"stdout", "stderr"} {
			if s, ok := fields[stream].(string); ok {
				b, _ := base64.StdEncoding.DecodeString(s)
				fields[stream] = string(b)
			}
		}
		evs = append(evs, shownEvent{kind, fields})
	}
	return evs, "", pid, false
}

// envd is the headers of a request to the envd of sandbox id.
func (p *player) envd(ctx context.Context, key, id string) (map[string]string, string) {
	token, failed := p.token(ctx, key, id)
	if failed != "" {
		return nil, failed
	}
	return map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}, ""
}

// token is the access token of sandbox id for key: a sandbox the key did
// not open here is reached as the SDK's connect does.
func (p *player) token(ctx context.Context, key, id string) (token, failed string) {
	if token, ok := p.tokens[id+" "+key]; ok {
		return token, ""
	}
	answer, m := p.call(ctx, "POST", p.e2b+"/sandboxes/"+id+"/connect", []byte(`{"timeout": 300}`), apiKey(key))
	if token, _ = m["envdAccessToken"].(string); token == "" {
		return "", "connect: " + answer
	}
	p.tokens[id+" "+key] = token
	return token, ""
}

func frame(flags byte, msg []byte) []byte {
	out := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}
