package files

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/service/errdefs"
)

// download is a Download of data, as OpenFile makes one.
func download(data []byte, text bool) *Download {
	return &Download{Info: FileInfo{Path: "f", Size: int64(len(data))}, Text: text, r: bytes.NewReader(data)}
}

// The streamed JSON form decodes to the file's exact content, text or
// base64, whatever falls on the buffer's boundaries (characters of 2 to 4
// bytes cut across reads, quotes, control characters), and a file is
// text only when it is valid UTF-8 without NUL bytes.
func TestStreamedContentJSONRoundTrips(t *testing.T) {
	text := strings.Repeat("aé€😀\"\\\n\t\x01<>&\u2028", TransferBuffer/7)
	for name, tc := range map[string]struct {
		data []byte
		text bool
	}{
		"multibyte text":    {[]byte(text), true},
		"text cut at 1":     {[]byte("x" + text), true},
		"text cut at 2":     {[]byte("xy" + text), true},
		"empty":             {nil, true},
		"NUL bytes":         {make([]byte, 3*TransferBuffer+5), false},
		"invalid UTF-8":     {append([]byte(text), 0xff), false},
		"a cut character":   {[]byte(text)[:len(text)-1], false},
		"NUL in valid text": {[]byte("abc\x00def"), false},
	} {
		got, err := isText(bytes.NewReader(tc.data))
		if err != nil || got != tc.text {
			t.Errorf("%s: isText %v %v, want %v", name, got, err, tc.text)
		}
		var out bytes.Buffer
		if err := WriteContentJSON(&out, "the/path", download(tc.data, got)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var fc FileContent
		if err := json.Unmarshal(out.Bytes(), &fc); err != nil {
			t.Fatalf("%s: not JSON: %v", name, err)
		}
		content := []byte(fc.Content)
		if fc.Encoding == "base64" {
			content, _ = base64.StdEncoding.DecodeString(fc.Content)
		}
		if fc.Path != "the/path" || fc.Size != len(tc.data) || fc.Encoding != map[bool]string{true: "utf-8", false: "base64"}[tc.text] || !bytes.Equal(content, tc.data) {
			t.Errorf("%s: %q size %d encoding %s, content equal %v", name, fc.Path, fc.Size, fc.Encoding, bytes.Equal(content, tc.data))
		}
		if want := EncodeContent("the/path", tc.data); want.Encoding != fc.Encoding {
			t.Errorf("%s: EncodeContent says %s, the stream %s", name, want.Encoding, fc.Encoding)
		}
	}
}

// A file that shrinks, or stops being text, while it is sent is an
// error, never a document that looks whole.
func TestStreamedContentJSONRefusesAChangedFile(t *testing.T) {
	d := download([]byte("abc"), true)
	d.Info.Size = 10 // it had 10 bytes when opened
	if err := WriteContentJSON(&bytes.Buffer{}, "f", d); !errors.Is(err, errdefs.ErrChangedDuringRead) {
		t.Errorf("a shrunk file: %v", err)
	}
	if err := WriteContentJSON(&bytes.Buffer{}, "f", download([]byte("abc\xff"), true)); !errors.Is(err, errdefs.ErrChangedDuringRead) {
		t.Errorf("text that stopped being text: %v", err)
	}
}
