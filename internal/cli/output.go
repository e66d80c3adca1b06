package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/codecage/codecage/internal/service"
)

// printHuman prints a result the way a terminal user expects: the code's
// stdout on stdout, its stderr and any error on stderr.
func printHuman(res *service.Result, stdout, stderr io.Writer) {
	fmt.Fprint(stdout, forTerminal(stdout, res.Stdout))
	fmt.Fprint(stderr, forTerminal(stderr, res.Stderr))
	if string(res.Result) != "null" && len(res.Result) > 0 {
		fmt.Fprintln(stdout, forTerminal(stdout, string(res.Result)))
	}
	if res.Truncated {
		fmt.Fprintln(stderr, "codecage: output truncated at the output limit")
	}
	if e := res.Error; e != nil {
		if e.Traceback != "" {
			fmt.Fprint(stderr, forTerminal(stderr, e.Traceback))
		} else {
			fmt.Fprintf(stderr, "codecage: %s: %s\n", e.Type, e.Message)
		}
	}
	for _, w := range res.Isolation.Warnings {
		fmt.Fprintln(stderr, "codecage: warning:", w)
	}
}

// forTerminal keeps escape sequences from sandboxed code off a real
// terminal: control bytes other than newline and tab are shown, not sent.
func forTerminal(w io.Writer, s string) string {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || (r >= 0x20 && r != 0x7f && (r < 0x80 || r > 0x9f)) {
			return r
		}
		return '\uFFFD'
	}, s)
}
