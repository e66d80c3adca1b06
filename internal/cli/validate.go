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

	"github.com/codecage/codecage/internal/sandbox"
)

// validateCmd checks code against the policy without running it.
func validateCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		code     string
		asJSON   = fs.Bool("json", false, "print the validate_code object")
		profiles listFlag
		imports  listFlag
	)
	fs.StringVar(&code, "code", "", "Python code to check")
	fs.StringVar(&code, "c", "", "shorthand for --code")
	fs.Var(&profiles, "profile", "profiles to check against, comma-separated (enables them)")
	fs.Var(&imports, "authorized-imports", "modules the code may import, comma-separated")
	cf := addConfigFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	src, err := readSource(code, fs.Args(), stdin)
	if err != nil {
		fmt.Fprintln(stderr, "codecage validate:", err)
		return exitUsage
	}
	cf.allow(profiles, imports)
	oneShot(cf)
	svc, status := newService(cf, stderr, "validate")
	if svc == nil {
		return status
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	v, err := svc.Validate(ctx, sandbox.ValidateRequest{Code: src, Profiles: profiles})
	if err != nil {
		fmt.Fprintln(stderr, "codecage validate:", err)
		if errors.Is(err, sandbox.ErrInvalidRequest) {
			return exitUsage
		}
		return exitInternal
	}
	if *asJSON {
		printJSON(stdout, v)
	} else {
		fmt.Fprintln(stdout, v.Validation.Message)
		for _, e := range v.Validation.Errors {
			fmt.Fprintln(stdout, "error:", e)
		}
		for _, w := range v.Validation.Warnings {
			fmt.Fprintln(stdout, "warning:", w)
		}
		for _, r := range v.Recommendations {
			fmt.Fprintln(stdout, "hint:", r)
		}
	}
	if !v.Validation.Valid {
		return exitFailure
	}
	return exitOK
}
