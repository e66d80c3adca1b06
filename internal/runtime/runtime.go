// Package runtime is the Python side of a sandbox: the harness that runs
// inside the jail (embedded in the binary) and the wire protocol the
// supervisor speaks with it over the jail's channel.
//
// Frames are a 4-byte big-endian length followed by that many bytes. The
// supervisor sends a [Request] in Python's marshal format (see marshal.go);
// the harness answers with one [Reply] in JSON.
package runtime

import (
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

//go:embed harness.py
var harnessFile string

//go:embed cell.py
var cellSource string

//go:embed kernels.py
var kernelsSource string

//go:embed kernel.js
var kernelJS string

// notebookFile is what a Jupyter kernel adds (display outputs, charts,
// magics): the harness holds it as a string and compiles it only when a
// run first needs it, since compiling source is most of the harness's
// start-up.
//
//go:embed notebook.py
var notebookFile string

// harnessSource is the harness as it runs: its prologue, cell.py (which
// the validator shares), kernels.py, then harness.py (which starts serving
// at its end). The JavaScript kernel and notebook.py, text the harness
// holds as strings, are the two arguments after it (Argv): one argument
// holds at most 128 KiB (the kernel's MAX_ARG_STRLEN), and the harness
// with them in it had reached that.
var harnessSource = harnessPrologue + cellSource + "\n" + kernelsSource + "\n" + harnessFile

// harnessPrologue takes the two texts from the command line and leaves
// sys.argv as python -c leaves it, ['-c'], for the code.
const harnessPrologue = "import sys\n_KERNEL_JS, _NOTEBOOK = sys.argv[1:3]\ndel sys.argv[1:]\n"

// harnessArg is where Argv puts the harness source.
const harnessArg = 7

// maxArgBytes is how long one argument of the command line may be
// (MAX_ARG_STRLEN, 32 pages), terminating NUL included.
const maxArgBytes = 128 << 10

// DefaultInterpreter is the Python the harness runs on. Debian's own
// interpreter, not whatever python3 is first on PATH.
const DefaultInterpreter = "/usr/bin/python3"

// MaxFrameBytes bounds a request frame (the code travels in it).
const MaxFrameBytes = 64 << 20

// MaxReplyBytes bounds a reply frame. The harness keeps its replies far
// below it (result, message, traceback and variable names are capped); the
// code can forge a frame header, so the supervisor must not trust one.
const MaxReplyBytes = 8 << 20

// Argv is the command line that starts the harness. -I keeps the working
// directory, user site and PYTHON* variables out (a planted sitecustomize or
// json.py cannot take over); -S skips site.py, whose work the harness does
// itself, faster and without running .pth files; -B writes no bytecode;
// -X utf8 fixes the encoding whatever the locale.
func Argv(interpreter string) []string {
	if interpreter == "" {
		interpreter = DefaultInterpreter
	}
	return []string{interpreter, "-I", "-S", "-B", "-X", "utf8", "-c", harnessSource, kernelJS, notebookFile}
}

// Package directories the harness puts on sys.path when they exist, in
// this order: a session's own packages (pip_install), its environment's
// layer (envstore), then the operator's layer.
const (
	SiteDir     = "/opt/codecage/site"
	EnvDir      = "/opt/codecage/env"
	PackagesDir = "/opt/codecage/packages"
	// TrustDir holds a sandbox's trust store for its egress proxy: its
	// authority's certificate (ca.pem) and it after the root's (bundle.pem).
	TrustDir = "/opt/codecage/trust"
)

// Env is the complete environment of the harness.
func Env() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/workspace",
		"LANG=C.UTF-8",
		"TMPDIR=/tmp",
		"MPLBACKEND=Agg",
	}
}

// MatplotlibCache is where setup builds matplotlib's font cache on the
// host; runs bind it read-only, or every run would rebuild it (seconds).
const MatplotlibCache = "/var/cache/codecage/matplotlib"

// DataScienceEnv adds what numerical libraries need: a prebuilt matplotlib
// cache and OpenBLAS settings the host chose for its processor. It returns
// the environment and the host paths to bind read-only.
func DataScienceEnv(env []string) ([]string, []string) {
	env = append(slices.Clone(env), "OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1")
	// Older OpenBLAS builds compute wrong results on some processors unless
	// told which kernel to use; keep the host's choice.
	for _, k := range []string{"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, "MPLCONFIGDIR=/tmp/matplotlib")
	var binds []string
	if fi, err := os.Stat(MatplotlibCache); err == nil && fi.IsDir() {
		env = append(env, "CODECAGE_MPL_CACHE="+MatplotlibCache)
		binds = append(binds, MatplotlibCache)
	}
	// Debian keeps matplotlib's defaults in /etc, outside the sandbox's /etc.
	for _, p := range []string{"/etc/matplotlibrc"} {
		if _, err := os.Stat(p); err == nil {
			binds = append(binds, p)
		}
	}
	return env, binds
}

// Request asks the harness to run code.
type Request struct {
	Code string `json:"code"`
	// AllowedImports lists the top-level modules the code may import; nil
	// switches the import policy off.
	AllowedImports []string `json:"allowed_imports"`
	// Profile names the policy in import errors.
	Profile string `json:"profile,omitempty"`
	// ImportHints maps a denied module to what would allow it.
	ImportHints map[string]string `json:"import_hints,omitempty"`
	// MaxResultBytes bounds the encoded last-expression value.
	MaxResultBytes int `json:"max_result_bytes"`
	// KeepAlive keeps the harness waiting for another request.
	KeepAlive bool `json:"keep_alive,omitempty"`
	// CapturePlots returns the matplotlib figures left open as PNG images.
	CapturePlots bool `json:"capture_plots,omitempty"`
	// EndMarker, written by the harness to stdout and stderr after the
	// code's output, tells a session where one request's output ends.
	EndMarker string `json:"end_marker,omitempty"`
	// Tools are the upstream tools the code may call through its `tools`
	// object (code mode); the calls come back as ToolCall frames.
	Tools []ToolSpec `json:"tools,omitempty"`
	// Context names the interpreter state a kept-alive harness runs the
	// code in: several live side by side ("" is the default one).
	Context string `json:"context,omitempty"`
	// NewContext starts Context afresh (no variables) in directory Cwd
	// ("": where the harness is).
	NewContext bool   `json:"new_context,omitempty"`
	Cwd        string `json:"cwd,omitempty"`
	// Env sets environment variables for this request only.
	Env map[string]string `json:"env,omitempty"`
	// Display asks for the rich representations of the last expression's
	// value, like a notebook's (Reply.Display).
	Display bool `json:"display,omitempty"`
	// Op, when set, asks for an operation on the interpreter's state
	// instead of a run ("snapshot", "restore": see state.go), within
	// TimeoutMS.
	Op        string `json:"op,omitempty"`
	TimeoutMS int    `json:"timeout_ms,omitempty"`
	// Language, when not Python's ("" is Python), runs the code in the
	// context's kernel of that language (see [Languages]), stopped past
	// TimeoutMS.
	Language string `json:"language,omitempty"`
}

// ToolSpec describes one upstream tool to the harness, which builds a
// Python function for it.
type ToolSpec struct {
	Server string // upstream server name (a Python identifier)
	Name   string // the tool's own name
	Py     string // its Python name
	Doc    string // the docstring: its signature and description
	Params []ToolParam
}

// ToolParam is one argument of a tool.
type ToolParam struct {
	Name     string // as the tool expects it
	Py       string // its Python name
	Required bool
	// Default is the schema's default as JSON text ("" for none).
	Default string
}

// ToolCall is a call the code made through its tools object.
type ToolCall struct {
	ID   int             `json:"id"`
	Tool string          `json:"tool"` // "server.tool"
	Args json.RawMessage `json:"args"`
}

// ToolResult answers a ToolCall: the result as JSON text, or why not.
type ToolResult struct {
	ID    int
	OK    bool
	Value string // JSON text when OK
	Error string
}

// WriteToolResult sends the answer to a tool call.
func WriteToolResult(w io.Writer, r ToolResult) error {
	m := map[string]any{"id": r.ID, "ok": r.OK, "error": r.Error}
	if r.OK {
		m["value"] = r.Value
	} else {
		m["value"] = nil
	}
	body, err := appendMarshal(nil, map[string]any{"tool_result": m})
	if err != nil {
		return err
	}
	return writeFrame(w, body)
}

// Image is a picture the run produced.
type Image struct {
	MIMEType string `json:"mime_type"`
	// Data is the image, base64-encoded.
	Data string `json:"data"`
}

// Reply is the harness's answer.
type Reply struct {
	// Result is the value of a final expression: the value itself when it
	// is JSON, else its repr as a string; null when there is none.
	Result     json.RawMessage `json:"result"`
	ResultType *string         `json:"result_type"`
	Variables  []string        `json:"variables"`
	Error      *Error          `json:"error"`
	ExitCode   int             `json:"exit_code"`
	Images     []Image         `json:"images"`
	// Display is the last value's representations by MIME type
	// ("text/plain" always, "text/html", "image/png" (base64), ... when the
	// value has them), when the request asked for them.
	Display map[string]string `json:"display,omitempty"`
	// Outputs are what the code displayed, in order, when the request
	// asked for display: display() calls, figures shown (png and, for
	// E2B, "e2b/chart"), PIL images shown; Images stays empty then.
	Outputs []Output `json:"outputs,omitempty"`
	// ToolCall is set instead of the above when the frame is a tool call
	// of the code, not the reply.
	ToolCall *ToolCall `json:"tool_call,omitempty"`
}

// Output is one display output: a value by MIME type, as Display.
type Output struct {
	Data map[string]string `json:"data"`
	// AfterResult: shown after the last value (a figure left open at the
	// end, as a notebook's inline backend shows it).
	AfterResult bool `json:"after_result,omitempty"`
}

// Error describes an exception raised by the code.
type Error struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
	Line      *int   `json:"line,omitempty"`
	Column    *int   `json:"column,omitempty"`
}

// WriteRequest sends req to the harness as one frame.
func WriteRequest(w io.Writer, req Request) error {
	frame, err := req.marshalAfter(make([]byte, 4))
	if err != nil {
		return err
	}
	n := len(frame) - 4
	if n > MaxFrameBytes {
		return fmt.Errorf("runtime: frame of %d bytes exceeds %d", n, MaxFrameBytes)
	}
	binary.BigEndian.PutUint32(frame, uint32(n))
	_, err = w.Write(frame)
	return err
}

func writeFrame(w io.Writer, body []byte) error {
	if len(body) > MaxFrameBytes {
		return fmt.Errorf("runtime: frame of %d bytes exceeds %d", len(body), MaxFrameBytes)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err := w.Write(buf)
	return err
}

// ErrBadFrame means the other side sent something that is not a frame.
var ErrBadFrame = errors.New("runtime: malformed frame")

// ReadReply reads the harness's reply, refusing frames over max bytes.
func ReadReply(r io.Reader, rep *Reply, max int) error {
	return readJSONFrame(r, rep, max)
}

func readJSONFrame(r io.Reader, v any, max int) error {
	body, err := readFrame(r, max)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	return nil
}

// readFrame reads one frame's body, refusing frames over max bytes.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrBadFrame, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return body, nil
}
