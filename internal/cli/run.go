package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/codecage/codecage/internal/sandbox"
)

// listFlag collects a comma-separated list, repeatable.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

func runCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		code        string
		timeout     = fs.Float64("timeout", 0, "wall-clock limit in seconds (default 30)")
		memMB       = fs.Int64("max-memory-mb", 0, "memory limit in MiB (default 256)")
		cpuSec      = fs.Float64("max-cpu-time-sec", 0, "CPU-time limit in seconds (default 30)")
		printLen    = fs.Int64("max-print-length", 0, "cap on stdout and stderr, each, in bytes (default 1 MiB)")
		asJSON      = fs.Bool("json", false, "print one JSON result object")
		interpreter = fs.String("interpreter", "", "Python interpreter inside the jail (default /usr/bin/python3)")
		imports     listFlag
	)
	fs.StringVar(&code, "code", "", "Python code to run")
	fs.StringVar(&code, "c", "", "shorthand for --code")
	fs.Var(&imports, "authorized-imports", "modules the code may import, comma-separated; \"*\" switches the import policy off (the jail stays)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: codecage run [flags] [file|-]\n\nRuns Python code from --code, a file, or standard input in a fresh sandbox.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	src, err := readSource(code, fs.Args(), stdin)
	if err != nil {
		fmt.Fprintln(stderr, "codecage run:", err)
		return exitUsage
	}

	svc, err := sandbox.New(sandbox.Config{Interpreter: *interpreter})
	if err != nil {
		fmt.Fprintln(stderr, "codecage run:", err, "(run \"codecage doctor\")")
		return exitInternal
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := svc.Execute(ctx, sandbox.Request{
		Code:           src,
		Timeout:        seconds(*timeout),
		CPUTime:        seconds(*cpuSec),
		MemoryBytes:    *memMB << 20,
		OutputBytes:    *printLen,
		AllowedImports: imports,
	})
	if err != nil {
		fmt.Fprintln(stderr, "codecage run:", err)
		if errors.Is(err, sandbox.ErrInvalidRequest) {
			return exitUsage
		}
		return exitInternal
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	} else {
		printHuman(res, stdout, stderr)
	}
	if !res.Success {
		if res.ExitCode > 0 {
			return res.ExitCode
		}
		return exitFailure
	}
	return exitOK
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func readSource(code string, args []string, stdin io.Reader) (string, error) {
	switch {
	case code != "" && len(args) > 0:
		return "", errors.New("give the code with --code or as a file, not both")
	case code != "":
		return code, nil
	case len(args) > 1:
		return "", errors.New("only one file may be given")
	case len(args) == 1 && args[0] != "-":
		b, err := os.ReadFile(args[0])
		return string(b), err
	}
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return "", errors.New("no code given: use --code, a file, or pipe the code to standard input")
	}
	b, err := io.ReadAll(stdin)
	return string(b), err
}
