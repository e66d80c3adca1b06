package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxStdioFrame bounds one newline-delimited stdio frame (the SDK's own
// default line limit): a longer line is refused and skipped, never held.
const MaxStdioFrame = mcp.DefaultMaxLineLength

// Stdio is the transport of `codecage mcp`: newline-delimited JSON-RPC on
// r and w, with the frame filter in front of the SDK. A malformed frame
// gets a JSON-RPC error (-32700 or -32600, id null when it has none) and
// the session goes on; request ids come back exactly as sent.
func Stdio(r io.Reader, w io.Writer, log *slog.Logger) mcp.Transport {
	if log == nil {
		log = slog.Default()
	}
	return &stdioTransport{r: r, w: w, log: log}
}

type stdioTransport struct {
	r   io.Reader
	w   io.Writer
	log *slog.Logger
}

func (t *stdioTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &stdioConn{w: t.w, log: t.log, ids: newIDMap(), incoming: make(chan readResult), closed: make(chan struct{})}
	go c.readLoop(t.r)
	return c, nil
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

type stdioConn struct {
	log *slog.Logger
	ids *idMap

	writeMu sync.Mutex // one frame at a time on w
	w       io.Writer

	incoming  chan readResult
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *stdioConn) SessionID() string { return "" }

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-c.incoming:
		return r.msg, r.err
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var data []byte
	if resp, ok := msg.(*jsonrpc.Response); ok {
		if sent, ok := c.ids.answer(resp.ID); ok {
			data = c.ids.encodeAnswer(resp, sent)
		}
	}
	if data == nil {
		var err error
		if data, err = jsonrpc.EncodeMessage(msg); err != nil {
			return fmt.Errorf("encoding a message: %w", err)
		}
	}
	return c.writeFrame(data)
}

func (c *stdioConn) writeFrame(data []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err := c.w.Write(append(data, '\n'))
	return err
}

func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// readLoop reads frames until r ends. It cannot be interrupted (stdin
// has no portable way to unblock a read), so it ends with the process.
func (c *stdioConn) readLoop(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br, MaxStdioFrame)
		if errors.Is(err, errFrameTooLong) {
			c.refuse(refuse(nil, jsonrpc.CodeParseError, "parse error: a frame is longer than %d bytes", MaxStdioFrame))
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if msg := c.accept(line); msg != nil && !c.deliver(readResult{msg: msg}) {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				c.deliver(readResult{err: io.EOF})
			} else {
				c.deliver(readResult{err: err})
			}
			return
		}
	}
}

func (c *stdioConn) deliver(r readResult) bool {
	select {
	case c.incoming <- r:
		return true
	case <-c.closed:
		return false
	}
}

// accept checks one frame: a bad one is answered here and nil returned;
// a good one becomes the message the SDK reads, with calls renumbered.
func (c *stdioConn) accept(line []byte) jsonrpc.Message {
	msg, _, bad := c.ids.inbound(line)
	if bad != nil {
		c.refuse(bad)
		return nil
	}
	if msg == nil { // an answer to nothing the server asked: nobody to tell
		c.log.Warn("mcp stdio: dropped a malformed response frame")
	}
	return msg
}

func (c *stdioConn) refuse(bad *frameError) {
	c.log.Debug("mcp stdio: refused a frame", "code", bad.err.Code, "reason", bad.err.Message)
	_ = c.writeFrame(errorFrame(bad.id, bad.err))
}

var errFrameTooLong = errors.New("frame too long")

// readLine returns the next line without its newline, holding at most
// limit bytes: a longer line is read to its end, dropped, and reported as
// errFrameTooLong.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > limit+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			if err != nil && err != io.EOF {
				return nil, err
			}
			return nil, errFrameTooLong
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}
