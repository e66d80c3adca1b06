package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/streamwrite"
)

// interpreterRoutes are the code interpreter's: /execute and contexts.
func (s *Server) interpreterRoutes() {
	m := s.interp
	m.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.Handle("POST /execute", streaming(http.HandlerFunc(s.execute)))
	m.HandleFunc("POST /contexts", s.createContext)
	m.HandleFunc("GET /contexts", s.listContexts)
	m.HandleFunc("DELETE /contexts/{id}", s.removeContext)
	m.HandleFunc("POST /contexts/{id}/restart", s.restartContext)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such route in codecage's code interpreter: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	})
}

// defaultRunTimeout bounds a runCode: the SDK's own default, within the
// operator's bound.
const defaultRunTimeout = 60 * time.Second

// ndjson writes the lines of an /execute answer as they come. The status
// goes with the first line, or after headerWait if the code is quiet (the
// SDK waits for headers only so long): until then a refusal can still be
// an HTTP error.
type ndjson struct {
	mu    sync.Mutex
	w     http.ResponseWriter
	rc    *http.ResponseController
	sent  bool
	timer *time.Timer
}

const headerWait = time.Second

// newNDJSON writes to w, each write within perWrite: a client that stops
// reading loses the answer then (its run and sandbox never wait for it).
func newNDJSON(w http.ResponseWriter, perWrite time.Duration) *ndjson {
	w = streamwrite.Wrap(w, perWrite)
	n := &ndjson{w: w, rc: http.NewResponseController(w)}
	n.timer = time.AfterFunc(headerWait, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.begin()
	})
	return n
}

// begin sends the headers; call with mu.
func (n *ndjson) begin() {
	if !n.sent {
		n.sent = true
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.WriteHeader(http.StatusOK)
		_ = n.rc.Flush()
	}
}

func (n *ndjson) line(v map[string]any) {
	b, _ := json.Marshal(v)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.begin()
	_, _ = n.w.Write(append(b, '\n'))
	_ = n.rc.Flush()
}

// fail reports a refused run: an HTTP error while the headers are unsent
// (429, 502, ... as the SDK maps them), else an error line.
func (n *ndjson) fail(err error) {
	n.timer.Stop()
	n.mu.Lock()
	if !n.sent {
		n.sent = true
		n.mu.Unlock()
		http.Error(n.w, err.Error(), daemonStatus(err))
		return
	}
	n.mu.Unlock()
	n.line(map[string]any{"type": "error", "name": "CodecageError", "value": err.Error(), "traceback": err.Error()})
	n.line(map[string]any{"type": "end_of_execution"})
}

// done stops the header timer once the answer is complete.
func (n *ndjson) done() {
	n.timer.Stop()
	n.mu.Lock() // a timer already running finishes first
	n.sent = true
	n.mu.Unlock()
}

// kernelFor resolves the language of a run or a new context as E2B's
// server does (normalized: "js" is javascript, "" python). A language no
// kernel runs here (E2B's r and java among them), or one the operator did
// not enable, is an error naming it and the languages that do run; the
// caller answers it with 404, the one status whose text the
// code-interpreter SDK always passes on (its NotFoundError; any other
// status but 502 becomes a SandboxError of the status line alone).
func (s *Server) kernelFor(lang string) (string, error) {
	var enabled []string
	for _, l := range service.KernelLanguages() {
		if s.svc.KernelEnabled(l) {
			enabled = append(enabled, l)
		}
	}
	l, ok := service.NormalizeLanguage(lang)
	if !ok {
		return "", fmt.Errorf("no kernel for language %s: codecage's code interpreter runs %s", service.Quote(lang), strings.Join(enabled, ", "))
	}
	if !s.svc.KernelEnabled(l) {
		return "", fmt.Errorf("the %s kernel is not enabled on this server (SANDBOX_KERNELS); it runs %s", l, strings.Join(enabled, ", "))
	}
	return l, nil
}

// execute runs code in a context of the sandbox's interpreter, answering
// as Jupyter's kernel gateway does: a line per output, result, error. The
// service resolves the context, restarts an interpreter that died (as a
// kernel is: the workspace kept, the variables lost) and counts the run.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	ref := sandboxOf(r.Context())
	var body wire.ExecuteBody
	if err := decodeBody(r, &body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if body.ContextID != "" && body.Language != "" {
		http.Error(w, "Only one of context_id or language can be provided", http.StatusBadRequest)
		return
	}
	req := service.Request{SessionID: ref.id, Owner: ref.owner, Code: body.Code, Env: body.EnvVars, Display: true,
		Timeout: min(defaultRunTimeout, s.cfg.MaxTimeout), ContextID: body.ContextID, RestartIfEnded: true}
	if body.ContextID == "" {
		lang, err := s.kernelFor(body.Language)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		req.Context, req.Language = service.LanguageState(lang), lang
	}
	out := newNDJSON(w, s.cfg.StreamWriteTimeout)
	defer out.done()
	var streamed [2]int
	req.OnOutput = func(stream, line string) {
		i := 0
		if stream == "stderr" {
			i = 1
		}
		streamed[i] += len(line)
		out.line(map[string]any{"type": stream, "text": line, "timestamp": time.Now().UnixMicro()})
	}
	res, err := s.svc.Execute(r.Context(), req)
	if (res != nil && res.Gone) || errors.Is(err, service.ErrSessionNotFound) || errors.Is(err, service.ErrSessionLost) {
		// Killed (or at its end) under the run: the stream breaks, as a
		// VM's does, and the SDK raises its "sandbox was killed" error.
		out.done()
		breakStream()
	}
	if err != nil {
		out.fail(err)
		return
	}
	s.results(out, res, streamed)
}

// results writes what a run left: the output its stream held back, what
// it displayed, its value, its error, its count.
func (s *Server) results(out *ndjson, res *service.Result, streamed [2]int) {
	if len(res.Stdout) > streamed[0] {
		out.line(map[string]any{"type": "stdout", "text": res.Stdout[streamed[0]:], "timestamp": time.Now().UnixMicro()})
	}
	if len(res.Stderr) > streamed[1] {
		out.line(map[string]any{"type": "stderr", "text": res.Stderr[streamed[1]:], "timestamp": time.Now().UnixMicro()})
	}
	// What the code displayed, then its value, then the figures it left
	// open, as a kernel's display_data and execute_result messages come.
	for _, o := range res.Outputs {
		if !o.AfterResult {
			out.line(resultLine(o.Data, false))
		}
	}
	if len(res.Display) > 0 {
		out.line(resultLine(res.Display, true))
	}
	for _, o := range res.Outputs {
		if o.AfterResult {
			out.line(resultLine(o.Data, false))
		}
	}
	if res.Error != nil {
		out.line(map[string]any{"type": "error", "name": res.Error.Type, "value": res.Error.Message, "traceback": res.Error.Traceback})
	}
	out.line(map[string]any{"type": "number_of_executions", "execution_count": res.Runs})
	out.line(map[string]any{"type": "end_of_execution"})
}

// resultLine is one result of a run: a value by MIME type, keyed as
// E2B's Result is.
func resultLine(data map[string]string, main bool) map[string]any {
	line := map[string]any{"type": "result", "is_main_result": main}
	for mime, d := range data {
		if key := resultKey(mime); key != "" {
			line[key] = displayValue(key, d)
		}
	}
	return line
}

// resultKey names a MIME type as E2B's Result does.
func resultKey(mime string) string {
	switch mime {
	case "text/plain":
		return "text"
	case "text/html":
		return "html"
	case "text/markdown":
		return "markdown"
	case "image/svg+xml":
		return "svg"
	case "image/png":
		return "png"
	case "image/jpeg":
		return "jpeg"
	case "application/pdf":
		return "pdf"
	case "text/latex":
		return "latex"
	case "application/json":
		return "json"
	case "application/javascript":
		return "javascript"
	case "e2b/data": // a DataFrame's columns
		return "data"
	case "e2b/chart": // a figure's structure
		return "chart"
	}
	return ""
}

// displayValue is the JSON representation as an object, not its text.
// A text loses one pair of surrounding quotes, as E2B's Result does
// (a str's repr "'hello'" is the text "hello").
func displayValue(key, data string) any {
	if key == "text" {
		return unquoteText(data)
	}
	if key == "json" || key == "data" || key == "chart" {
		// Passed through as the harness wrote it: decoding into an any
		// and encoding again would turn 1.0 into 1, an int to E2B's SDK
		// where E2B gives a float (a chart's ticks and points).
		if json.Valid([]byte(data)) {
			return json.RawMessage(data)
		}
	}
	return data
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	ref := sandboxOf(r.Context())
	var body wire.ContextBody
	if err := decodeBody(r, &body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	lang, err := s.kernelFor(body.Language)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	c, err := s.svc.CreateContext(r.Context(), ref.id, ref.owner, lang, body.Cwd)
	if err != nil {
		http.Error(w, err.Error(), daemonStatus(err))
		return
	}
	writeJSON(w, http.StatusOK, wire.CodeContext{ID: c.ID, Language: c.Language, Cwd: c.Cwd})
}

// listContexts lists E2B's startup default contexts (those of the
// kernels this server runs), the defaults runs made, and those created.
func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	ref := sandboxOf(r.Context())
	list, err := s.svc.ListContexts(r.Context(), ref.id, ref.owner)
	if err != nil {
		http.Error(w, err.Error(), daemonStatus(err))
		return
	}
	out := make([]wire.CodeContext, 0, len(list))
	for _, c := range list {
		out = append(out, wire.CodeContext{ID: c.ID, Language: c.Language, Cwd: c.Cwd})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) removeContext(w http.ResponseWriter, r *http.Request) {
	ref := sandboxOf(r.Context())
	if err := s.svc.RemoveContext(r.Context(), ref.id, ref.owner, r.PathValue("id")); err != nil {
		http.Error(w, err.Error(), daemonStatus(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	ref := sandboxOf(r.Context())
	if err := s.svc.RestartContext(r.Context(), ref.id, ref.owner, r.PathValue("id")); err != nil {
		http.Error(w, err.Error(), daemonStatus(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// unquoteText strips one pair of matching quotes around a text, as E2B's
// code interpreter does with every result's text/plain.
func unquoteText(t string) string {
	if len(t) >= 2 && (t[0] == '\'' || t[0] == '"') && t[len(t)-1] == t[0] {
		return t[1 : len(t)-1]
	}
	return t
}
