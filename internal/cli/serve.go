package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/mcpserver"
)

// mcpCmd serves MCP over stdio: protocol frames only on stdout, logs on
// stderr.
func mcpCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := addConfigFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	svc, code := newService(cf, stderr, "mcp")
	if svc == nil {
		return code
	}
	defer svc.Close()
	svc.SetLogger(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	server := mcpserver.New(svc, log)
	t := &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}
	if err := server.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		fmt.Fprintln(stderr, "codecage mcp:", err)
		return exitInternal
	}
	return exitOK
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// serveCmd serves MCP over streamable HTTP (/mcp) and SSE (/mcp/sse), and
// /health, on one listener.
func serveCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8001", "address to listen on")
	cf := addConfigFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	svc, code := newService(cf, stderr, "serve")
	if svc == nil {
		return code
	}
	defer svc.Close()
	svc.SetLogger(log)
	streamable, sse := mcpserver.HTTPHandlers(mcpserver.New(svc, log))
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamable)
	mux.Handle("/mcp/sse", sse)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitUsage
	}
	if host, _, _ := net.SplitHostPort(*listen); host != "127.0.0.1" && host != "localhost" && host != "::1" {
		log.Warn("listening beyond loopback without API keys: anyone who reaches this port can run code", "listen", *listen)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("codecage serving", "addr", l.Addr().String(), "mcp", "/mcp", "sse", "/mcp/sse")
	fmt.Fprintf(stdout, "codecage serving on http://%s (MCP at /mcp, SSE at /mcp/sse)\n", l.Addr())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "codecage serve:", err)
		return exitInternal
	}
	return exitOK
}
