package scenarios_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// The process steps: envd's process service (process.Process over
// Connect), as E2B's SDK drives it: a background start whose stream the
// handle keeps, list, stdin, a signal, and a connect that follows a
// running process. REST and MCP have no processes: a scenario of these
// steps names e2b alone in its -- surfaces --.

// openStream is a process stream a step left open (a background start, a
// connect), as the SDK's command handle keeps it; a wait reads it to its
// end.
type openStream struct {
	resp   *http.Response
	cancel context.CancelFunc
}

// onlyE2B stops a scenario that plays a step of E2B's alone elsewhere.
func (p *player) onlyE2B(st step) {
	if p.on != "e2b" {
		p.t.Fatalf("%q: %s has no such operation (E2B alone has it): name the surfaces that do in -- surfaces --", st.line, p.on)
	}
}

// spawn starts cmd in the background (the SDK's commands.run(cmd,
// {background: true, stdin, tag})): the answer is its stream up to the
// start event; the rest waits for a wait step.
func (p *player) spawn(ctx context.Context, st step) string {
	p.onlyE2B(st)
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	msg := map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", st.args["cmd"]}}}
	if st.args["stdin"] == "yes" {
		msg["stdin"] = true
	}
	if tag := st.args["tag"]; tag != "" {
		msg["tag"] = tag
	}
	b, _ := json.Marshal(msg)
	return p.openStream(ctx, st, id, "Start", b, "$p")
}

// connect follows a running process from now on (the SDK's
// commands.connect(pid)): the answer is its stream up to the start
// event, as for spawn.
func (p *player) connect(ctx context.Context, st step) string {
	p.onlyE2B(st)
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	b, _ := json.Marshal(map[string]any{"process": p.selector(st)})
	return p.openStream(ctx, st, id, "Connect", b, "$c")
}

// openStream opens a process stream that outlives its step and reads it
// up to the start event; later steps call it as= (default def), and its
// process by the same name.
func (p *player) openStream(ctx context.Context, st step, id, method string, msg []byte, def string) string {
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // until the start event, the step's bound
	resp, failed := p.stream(sctx, st.args["key"], id, method, msg)
	if resp == nil {
		cancel()
		return failed
	}
	answer := fmt.Sprintf("%d\n", resp.StatusCode)
	var pid uint32
	for {
		evs, tail, started, done := p.nextEvent(resp.Body)
		for _, ev := range evs {
			answer += p.render(ev)
		}
		answer += tail
		pid = started
		if done {
			resp.Body.Close()
			cancel()
			return answer
		}
		if pid != 0 {
			break
		}
	}
	if !stop() { // the step's bound passed meanwhile
		resp.Body.Close()
		return answer + "(the step's time ran out)\n"
	}
	as := cmp.Or(st.args["as"], def)
	if old := p.streams[as]; old != nil {
		old.cancel()
	}
	p.streams[as], p.pids[as] = &openStream{resp: resp, cancel: cancel}, pid
	return answer
}

// wait reads the rest of stream=, to its end (the SDK's handle.wait()),
// within the step's bound.
func (p *player) wait(ctx context.Context, st step) string {
	p.onlyE2B(st)
	name := st.args["stream"]
	s := p.streams[name]
	if s == nil {
		return "no open stream " + name
	}
	delete(p.streams, name)
	defer s.cancel()
	defer s.resp.Body.Close()
	stop := context.AfterFunc(ctx, func() { s.resp.Body.Close() })
	defer stop()
	return p.events(s.resp.Body)
}

// selector names a step's process: process=$p (the pid its start gave),
// else tag=T.
func (p *player) selector(st step) map[string]any {
	if name := st.args["process"]; name != "" {
		pid, ok := p.pids[name]
		if !ok {
			n, err := strconv.ParseUint(name, 10, 32)
			if err != nil {
				p.t.Fatalf("%q: no process %s started", st.line, name)
			}
			pid = uint32(n)
		}
		return map[string]any{"pid": pid}
	}
	return map[string]any{"tag": st.args["tag"]}
}

// processRPC makes one of envd's unary process calls (List, SendInput,
// CloseStdin, SendSignal) in the step's sandbox, as the SDK's Connect
// client does in JSON.
func (p *player) processRPC(ctx context.Context, st step) string {
	p.onlyE2B(st)
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	var method string
	var msg map[string]any
	switch st.op {
	case "processes":
		method, msg = "List", map[string]any{}
	case "input":
		method, msg = "SendInput", map[string]any{"process": p.selector(st), "input": map[string]any{"stdin": []byte(st.args["data"])}}
	case "closestdin":
		method, msg = "CloseStdin", map[string]any{"process": p.selector(st)}
	case "signal":
		method, msg = "SendSignal", map[string]any{"process": p.selector(st), "signal": "SIGNAL_" + cmp.Or(st.args["signal"], "SIGKILL")}
	}
	h, failed := p.envd(ctx, st.args["key"], id)
	if failed != "" {
		return failed
	}
	h["Connect-Protocol-Version"] = "1"
	b, _ := json.Marshal(msg)
	answer, _ := p.call(ctx, "POST", p.e2b+"/process.Process/"+method, b, h)
	return answer
}

// closeStreams ends the streams no wait read.
func (p *player) closeStreams() {
	for name, s := range p.streams {
		s.resp.Body.Close()
		s.cancel()
		delete(p.streams, name)
	}
}
