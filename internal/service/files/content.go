package files

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/service/errdefs"
)

// FileContent is a file read from a workspace: text when it is valid
// UTF-8 without NUL bytes, else base64 (never one \u0000 escape per byte);
// Encoding says which. Content comes last: a download streams it.
type FileContent struct {
	Path     string `json:"path"`
	Size     int    `json:"size" doc:"The file's size in bytes."`
	Encoding string `json:"encoding" enum:"utf-8,base64" doc:"utf-8: content is the text; base64: the file is binary (not valid UTF-8, or holds NUL bytes) and content is its bytes in standard base64."`
	Content  string `json:"content"`
}

// EncodeContent returns data as a FileContent.
func EncodeContent(path string, data []byte) FileContent {
	out := FileContent{Path: path, Size: len(data), Encoding: "utf-8", Content: string(data)}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(data)
	}
	return out
}

// WriteContentJSON writes d as a FileContent JSON document (one line),
// streaming the content through fixed buffers: base64 unless d.Text (open
// it with classify). shown is the path as the caller named it.
func WriteContentJSON(w io.Writer, shown string, d *Download) error {
	bw := bufio.NewWriterSize(w, TransferBuffer)
	enc := "base64"
	if d.Text {
		enc = "utf-8"
	}
	name, _ := json.Marshal(shown)
	fmt.Fprintf(bw, `{"path":%s,"size":%d,"encoding":%q,"content":"`, name, d.Info.Size, enc)
	var err error
	if d.Text {
		err = copyEscaped(bw, d)
	} else {
		b64 := base64.NewEncoder(base64.StdEncoding, bw)
		if _, err = io.CopyBuffer(onlyWriter{b64}, onlyReader{d}, make([]byte, TransferBuffer)); err == nil {
			err = b64.Close()
		}
	}
	if err != nil {
		return err
	}
	if _, err := bw.WriteString("\"}\n"); err != nil {
		return err
	}
	return bw.Flush()
}

// copyEscaped writes r's UTF-8 text as the inside of a JSON string.
func copyEscaped(w *bufio.Writer, r io.Reader) error {
	buf := make([]byte, TransferBuffer)
	carry := 0
	for {
		n, rerr := io.ReadFull(r, buf[carry:])
		chunk := buf[:carry+n]
		end := len(chunk)
		if rerr == nil {
			end = completeRunes(chunk)
		}
		if !utf8.Valid(chunk[:end]) {
			return errdefs.ErrChangedDuringRead
		}
		if err := writeEscaped(w, chunk[:end]); err != nil {
			return err
		}
		carry = copy(buf, chunk[end:])
		switch rerr {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return nil
		default:
			return rerr
		}
	}
}

const hexDigits = "0123456789abcdef"

// writeEscaped escapes what JSON requires in a string: quotes,
// backslashes and control characters.
func writeEscaped(w *bufio.Writer, b []byte) error {
	start := 0
	for i, c := range b {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		w.Write(b[start:i])
		switch c {
		case '"', '\\':
			w.WriteByte('\\')
			w.WriteByte(c)
		case '\n':
			w.WriteString(`\n`)
		case '\r':
			w.WriteString(`\r`)
		case '\t':
			w.WriteString(`\t`)
		default:
			w.WriteString(`\u00`)
			w.WriteByte(hexDigits[c>>4])
			w.WriteByte(hexDigits[c&0xf])
		}
		start = i + 1
	}
	_, err := w.Write(b[start:])
	return err
}

// onlyWriter and onlyReader hide ReadFrom and WriteTo: the copy goes
// through the buffer given.
type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }
