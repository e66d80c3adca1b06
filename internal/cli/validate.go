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

	"github.com/codecage/codecage/internal/service"
)

// validateCmd checks code against the policy without running it.
func validateCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the validate_code object")
	in := addCodeInput(fs, "check")
	if status, ok := parse(fs, args); !ok {
		return status
	}
	src, svc, stop, status := in.start(fs, stdin, stderr, "validate")
	if svc == nil {
		return status
	}
	defer stop()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	v, err := svc.Validate(ctx, service.ValidateRequest{Code: src, Profiles: in.profiles})
	if err != nil {
		fmt.Fprintln(stderr, "codecage validate:", err)
		if errors.Is(err, service.ErrInvalidRequest) {
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
