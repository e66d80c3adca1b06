package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	root "github.com/codecage/codecage/internal/server" // the composition root; "server" names a test type here
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
	cfg, ok := loadConfig(cf, stderr, "mcp")
	if !ok {
		return exitUsage
	}
	if why := hostRefusal(cfg); why != "" {
		fmt.Fprintf(stderr, "codecage mcp: this host cannot run sandboxes (codecage doctor says):\n%s\n", why)
		return exitFailure
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ServeStdio(ctx, cfg, root.Options{Log: newLogger(cfg, stderr), Stdin: stdin, Stdout: stdout})
	return serverExit(err, stderr, "mcp")
}

// serveCmd serves the REST API, MCP over streamable HTTP (/mcp) and SSE
// (/mcp/sse), metrics and health (and the E2B API with --e2b-listen), until
// SIGTERM: see internal/server.
func serveCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := addConfigFlags(fs) // --listen and --e2b-listen among them
	cf.own("listen", "e2b-listen")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	cfg, ok := loadConfig(cf, stderr, "serve")
	if !ok {
		return exitUsage
	}
	if why := hostRefusal(cfg); why != "" {
		fmt.Fprintf(stderr, "codecage serve: this host cannot run sandboxes (codecage doctor says):\n%s\n", why)
		return exitFailure
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second signal kills a shutdown that hangs
	err := root.Run(ctx, cfg, root.Options{Log: newLogger(cfg, stderr), Stdout: stdout})
	return serverExit(err, stderr, "serve")
}

// serverExit reports a server's failure and returns the exit status.
func serverExit(err error, stderr io.Writer, cmd string) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "codecage %s: %v\n", cmd, err)
	if errors.As(err, new(*root.UsageError)) {
		return exitUsage
	}
	return exitInternal
}
