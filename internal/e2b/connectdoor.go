package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/e2b/wire"
)

// The door of envd's Connect procedures. A request body is bounded by
// SANDBOX_MAX_BODY_SIZE as REST's is: a Content-Length over it is refused
// before anything is read, a body that grows past it is cut there, and a
// compressed message is refused as soon as it inflates past it (never
// inflated whole). A body the client broke (a chunk cut off, an envelope
// that ends early) is the client's error (invalid_argument), not the
// server's. The limit is per request, and a request here is one message.

// connectOptions are every Connect handler's options.
func (s *Server) connectOptions() []connect.HandlerOption {
	limit := s.cfg.MaxBodySize
	return []connect.HandlerOption{
		connect.WithCodec(wire.Codec{}),
		connect.WithReadMaxBytes(int(min(limit, 1<<31-1))),
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &cappedGzip{limit: limit} },
			func() connect.Compressor { return gzip.NewWriter(io.Discard) }),
		connect.WithInterceptors(shortErrors{}),
	}
}

// connectDoor reads a Connect request's body within the limit before the
// procedure sees it, answering in the client's protocol when it cannot.
func (s *Server) connectDoor(h http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := api.ReadBody(w, r, s.cfg.MaxBodySize)
		if err != nil {
			_ = errs.Write(w, r, connect.NewError(api.StatusOf(err).Connect, err))
			return
		}
		if enveloped(r.Header.Get("Content-Type")) {
			if err := checkEnvelopes(body); err != nil {
				_ = errs.Write(w, r, connect.NewError(connect.CodeInvalidArgument, err))
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		h.ServeHTTP(w, r)
	})
}

// enveloped reports whether a content type frames its messages in
// envelopes (Connect streaming, gRPC, gRPC-Web).
func enveloped(ct string) bool {
	ct = strings.ToLower(ct)
	return strings.HasPrefix(ct, "application/connect+") || strings.HasPrefix(ct, "application/grpc")
}

// checkEnvelopes checks that body is whole envelopes (a flags byte, a
// 32-bit big-endian size, that many bytes), so that a truncated one is
// named as the client's error.
func checkEnvelopes(body []byte) error {
	for i := 0; i < len(body); {
		if len(body)-i < 5 {
			return fmt.Errorf("the request body ends inside a message's 5-byte envelope prefix (%d bytes of it at offset %d)", len(body)-i, i)
		}
		size := int(binary.BigEndian.Uint32(body[i+1 : i+5]))
		if rest := len(body) - i - 5; size > rest {
			return fmt.Errorf("the request body ends inside a message: its envelope promises %d bytes, %d follow", size, rest)
		}
		i += 5 + size
	}
	return nil
}

// cappedGzip inflates at most limit bytes: one more is a
// resource_exhausted error at once, so a small bomb costs no more than
// the limit in memory and time.
type cappedGzip struct {
	zr    gzip.Reader
	limit int64
	n     int64
}

func (c *cappedGzip) Read(p []byte) (int, error) {
	if c.n >= c.limit {
		var one [1]byte
		if k, err := io.ReadFull(&c.zr, one[:]); k == 0 {
			return 0, err
		}
		return 0, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("the message inflates to more than the limit of %d bytes (SANDBOX_MAX_BODY_SIZE)", c.limit))
	}
	if room := c.limit - c.n; int64(len(p)) > room {
		p = p[:room]
	}
	k, err := c.zr.Read(p)
	c.n += int64(k)
	return k, err
}

func (c *cappedGzip) Reset(r io.Reader) error {
	c.n = 0
	return c.zr.Reset(r)
}

func (c *cappedGzip) Close() error { return c.zr.Close() }

// maxErrorText bounds a Connect error's message: whatever a procedure
// says, the answer does not echo a client's input at length.
const maxErrorText = 1024

// shortErrors cuts the messages of the procedures' errors to
// maxErrorText.
type shortErrors struct{}

func (shortErrors) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, shorten(err)
	}
}

func (shortErrors) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (shortErrors) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return shorten(next(ctx, conn))
	}
}

func shorten(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var ce *connect.Error
	code := connect.CodeOf(err)
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	if len(msg) <= maxErrorText {
		return err
	}
	return connect.NewError(code, errors.New(strings.ToValidUTF8(msg[:maxErrorText], "")+"… (cut)"))
}

// streaming lets an answer that lasts as long as its process (a command's
// output, runCode's) outlive the server's write timeout, which is meant
// for answers written at once; the stream bounds its writes itself.
func streaming(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
	})
}
