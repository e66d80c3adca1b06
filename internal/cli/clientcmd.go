package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// clientCmd is one subcommand of the REST client commands (sessions,
// snapshots): its flags beside the shared --url, --api-key and --json, and
// its positional arguments, which may come before or after the flags.
type clientCmd struct {
	name   string // "sessions exec", for messages
	usage  string // the command's usage text
	fs     *flag.FlagSet
	url    string
	key    string
	json   bool
	args   []string
	stdout io.Writer
	stderr io.Writer
}

func newClientCmd(name, usage string, stdout, stderr io.Writer) *clientCmd {
	c := &clientCmd{name: name, usage: usage, stdout: stdout, stderr: stderr}
	c.fs = flag.NewFlagSet(name, flag.ContinueOnError)
	c.fs.SetOutput(stderr)
	c.fs.Usage = func() {
		fmt.Fprint(stderr, usage+"\nFlags:\n")
		c.fs.PrintDefaults()
	}
	// The defaults are read after parsing, so that -h shows no key.
	c.fs.StringVar(&c.url, "url", "", "the server's base URL (default $CODECAGE_URL, else "+defaultServerURL()+")")
	c.fs.StringVar(&c.key, "api-key", "", "the API key (default $CODECAGE_API_KEY)")
	c.fs.BoolVar(&c.json, "json", false, "print the server's JSON answer")
	return c
}

// parse parses flags wherever they stand among the arguments and checks
// that there are between min and max positional ones (each an id or code,
// never empty). When it returns false the command ends with the status it
// gives.
func (c *clientCmd) parse(args []string, min, max int, what string) (int, bool) {
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK, false
			}
			return exitUsage, false
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			break
		}
		// After "--" every argument is positional.
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			c.args = append(c.args, rest...)
			break
		}
		c.args, args = append(c.args, rest[0]), rest[1:]
	}
	switch {
	case len(c.args) < min:
		return c.usageError("missing %s", what)
	case len(c.args) > max:
		return c.usageError("unexpected argument %q", c.args[max])
	}
	for _, a := range c.args {
		if strings.TrimSpace(a) == "" {
			return c.usageError("an empty %s", what)
		}
	}
	return 0, true
}

func (c *clientCmd) usageError(format string, a ...any) (int, bool) {
	fmt.Fprintf(c.stderr, "codecage %s: %s\n\n%s", c.name, fmt.Sprintf(format, a...), c.usage)
	return exitUsage, false
}

// client is the REST client of the flags and environment.
func (c *clientCmd) client() (*restClient, int, bool) {
	rc, err := newRESTClient(cmp.Or(c.url, os.Getenv("CODECAGE_URL"), defaultServerURL()),
		cmp.Or(c.key, os.Getenv("CODECAGE_API_KEY")))
	if err != nil {
		fmt.Fprintf(c.stderr, "codecage %s: %v\n", c.name, err)
		return nil, exitUsage, false
	}
	return rc, 0, true
}

// call sends one request, canceled by SIGINT or SIGTERM, and reports a
// failure; it returns the answer, or false and the exit status.
func (c *clientCmd) call(method, path string, query url.Values, body any) (json.RawMessage, int, bool) {
	rc, status, ok := c.client()
	if !ok {
		return nil, status, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	data, err := rc.do(ctx, method, path, query, body)
	if err != nil {
		return nil, c.fail(err), false
	}
	return data, exitOK, true
}

// fail reports err and returns the exit status: a server's refusal
// (exitRefused, its problem document on stdout with --json), a server
// that did not answer (exitInternal), or an interruption.
func (c *clientCmd) fail(err error) int {
	var se *serverError
	var ue *unreachableError
	switch {
	case errors.As(err, &se):
		if c.json {
			c.printJSON(se.raw)
		}
		fmt.Fprintf(c.stderr, "codecage %s: %s\n", c.name, forTerminal(c.stderr, se.Error()))
		return exitRefused
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "codecage %s: %s\n", c.name, forTerminal(c.stderr, ue.Error()))
		return exitInternal
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(c.stderr, "codecage %s: interrupted\n", c.name)
		return exitInternal
	}
	fmt.Fprintf(c.stderr, "codecage %s: %v\n", c.name, err)
	return exitInternal
}

// printJSON prints the server's JSON, indented.
func (c *clientCmd) printJSON(data json.RawMessage) {
	if len(data) == 0 {
		return
	}
	var buf bytes.Buffer
	if json.Indent(&buf, data, "", "  ") != nil {
		buf.Reset()
		buf.Write(data)
	}
	fmt.Fprintln(c.stdout, strings.TrimRight(buf.String(), "\n"))
}
