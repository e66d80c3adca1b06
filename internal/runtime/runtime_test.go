package runtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := Request{Code: "print('é\x00')", AllowedImports: []string{"math"}, MaxResultBytes: 10}
	if err := WriteFrame(&buf, in); err != nil {
		t.Fatal(err)
	}
	var out Request
	if err := ReadFrame(&buf, &out, MaxFrameBytes); err != nil {
		t.Fatal(err)
	}
	if out.Code != in.Code || len(out.AllowedImports) != 1 || out.MaxResultBytes != 10 {
		t.Fatalf("got %+v", out)
	}
}

func TestReadFrameRejectsBadInput(t *testing.T) {
	frame := func(n uint32, body string) io.Reader {
		b := make([]byte, 4)
		binary.BigEndian.PutUint32(b, n)
		return strings.NewReader(string(b) + body)
	}
	var v Reply
	if err := ReadFrame(frame(1<<31, ""), &v, 1024); !errors.Is(err, ErrBadFrame) {
		t.Errorf("oversized: %v", err)
	}
	if err := ReadFrame(frame(5, "{nope"), &v, 1024); !errors.Is(err, ErrBadFrame) {
		t.Errorf("not JSON: %v", err)
	}
	if err := ReadFrame(frame(10, "{}"), &v, 1024); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short body: %v", err)
	}
	if err := ReadFrame(strings.NewReader(""), &v, 1024); !errors.Is(err, io.EOF) {
		t.Errorf("empty: %v", err)
	}
}

func TestArgvIsolatesTheInterpreter(t *testing.T) {
	argv := Argv("")
	if argv[0] != DefaultInterpreter || argv[1] != "-I" || argv[len(argv)-1] != harnessSource {
		t.Fatalf("argv %q", argv[:len(argv)-1])
	}
	for _, kv := range Env() {
		if strings.HasPrefix(kv, "PYTHON") || strings.HasPrefix(kv, "LD_") {
			t.Errorf("environment carries %s", kv)
		}
	}
}
