package runtime

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// The request encoding is checked against the real interpreter: what Go
// writes, Python's marshal reads back as the same dict.
func TestRequestIsReadByPythonMarshal(t *testing.T) {
	req := Request{Code: "print('é\x00')\n" + strings.Repeat("x", 70000), AllowedImports: []string{"math", "json"},
		Profile: "basic", ImportHints: map[string]string{"os": "use profile filesystem"}, MaxResultBytes: 10, KeepAlive: true}
	var buf bytes.Buffer
	if err := WriteRequest(&buf, req); err != nil {
		t.Fatal(err)
	}
	body := buf.Bytes()[4:]
	if n := binary.BigEndian.Uint32(buf.Bytes()); int(n) != len(body) {
		t.Fatalf("length prefix %d, body %d", n, len(body))
	}
	script := `import marshal, sys, json
d = marshal.loads(sys.stdin.buffer.read())
print(json.dumps(d, sort_keys=True))`
	cmd := exec.Command(DefaultInterpreter, "-I", "-c", script)
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got["code"] != req.Code || got["profile"] != "basic" || got["max_result_bytes"] != float64(10) || got["keep_alive"] != true {
		t.Fatalf("decoded %v", got)
	}
	if imps := got["allowed_imports"].([]any); len(imps) != 2 || imps[1] != "json" {
		t.Fatalf("allowed_imports %v", got["allowed_imports"])
	}
	if hints := got["import_hints"].(map[string]any); hints["os"] != "use profile filesystem" {
		t.Fatalf("hints %v", hints)
	}
	// nil list means "policy off": it must arrive as None.
	buf.Reset()
	if err := WriteRequest(&buf, Request{Code: "1"}); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(DefaultInterpreter, "-I", "-c", "import marshal, sys; print(marshal.loads(sys.stdin.buffer.read())['allowed_imports'])")
	cmd.Stdin = bytes.NewReader(buf.Bytes()[4:])
	if out, err := cmd.Output(); err != nil || string(out) != "None\n" {
		t.Fatalf("nil list: %q %v", out, err)
	}
}

func TestReadFrameRejectsBadInput(t *testing.T) {
	frame := func(n uint32, body string) io.Reader {
		b := make([]byte, 4)
		binary.BigEndian.PutUint32(b, n)
		return strings.NewReader(string(b) + body)
	}
	var v Reply
	if err := ReadReply(frame(1<<31, ""), &v, 1024); !errors.Is(err, ErrBadFrame) {
		t.Errorf("oversized: %v", err)
	}
	if err := ReadReply(frame(5, "{nope"), &v, 1024); !errors.Is(err, ErrBadFrame) {
		t.Errorf("not JSON: %v", err)
	}
	if err := ReadReply(frame(10, "{}"), &v, 1024); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short body: %v", err)
	}
	if err := ReadReply(strings.NewReader(""), &v, 1024); !errors.Is(err, io.EOF) {
		t.Errorf("empty: %v", err)
	}
}

func TestArgvIsolatesTheInterpreter(t *testing.T) {
	argv := Argv("")
	if argv[0] != DefaultInterpreter || argv[1] != "-I" || argv[harnessArg-1] != "-c" || argv[harnessArg] != harnessSource {
		t.Fatalf("argv %q", argv[:harnessArg])
	}
	for _, kv := range Env() {
		if strings.HasPrefix(kv, "PYTHON") || strings.HasPrefix(kv, "LD_") {
			t.Errorf("environment carries %s", kv)
		}
	}
}

// Each argument of each command line fits the kernel's bound on one
// argument, with room to grow: past it, every sandbox fails to start
// ("argument list too long"), which the zygote's (its code and the
// harness in one argument) once came within a few hundred bytes of.
func TestArgumentsFitTheKernelsBound(t *testing.T) {
	for name, argv := range map[string][]string{"harness": Argv(""), "zygote": ZygoteArgv(""), "validator": ValidatorArgv("")} {
		for i, a := range argv {
			if len(a)+1 > maxArgBytes*7/8 {
				t.Errorf("%s argument %d: %d bytes, over 7/8 of the %d a command line's argument may hold", name, i, len(a), maxArgBytes)
			}
			if strings.ContainsRune(a, 0) {
				t.Errorf("%s argument %d holds a NUL", name, i)
			}
		}
	}
}
