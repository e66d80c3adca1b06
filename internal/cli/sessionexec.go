package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"golang.org/x/term"

	"github.com/codecage/codecage/internal/service"
)

// maxClientCode bounds the code the client reads from a file or standard
// input; the server applies its own, smaller limits (SANDBOX_MAX_CODE_SIZE,
// SANDBOX_MAX_BODY_SIZE) and says so.
const maxClientCode = 64 << 20

// sessionsExec is POST /sessions/{id}/execute: the code's output as
// `codecage run` prints it, and its exit status.
func sessionsExec(c *clientCmd, args []string, stdin io.Reader) int {
	file := c.fs.String("file", "", "run the code of this file")
	timeout := secondsValue(c.fs, "timeout", "wall-clock limit of this run (30s, 2m, or seconds; default: the server's)")
	language := c.fs.String("language", "", "run in the session's kernel of this language: javascript (js), typescript (ts) or bash (default: its Python interpreter; the server must enable it, SANDBOX_KERNELS)")
	if status, ok := c.parse(args, 1, 2, "session id"); !ok {
		return status
	}
	code, err := execSource(c.args[1:], *file, stdin)
	if err != nil {
		status, _ := c.usageError("%v", err)
		return status
	}
	body := map[string]any{"code": code}
	if *timeout != 0 {
		body["timeout"] = *timeout
	}
	if *language != "" {
		body["language"] = *language
	}
	data, status, ok := c.call(http.MethodPost, "/sessions/"+idPath(c.args[0])+"/execute", nil, body)
	if !ok {
		return status
	}
	var res service.Result
	if err := json.Unmarshal(data, &res); err != nil {
		fmt.Fprintf(c.stderr, "codecage %s: the server's answer is not a result: %v\n", c.name, err)
		return exitInternal
	}
	if c.json {
		c.printJSON(data)
	} else {
		printHuman(&res, c.stdout, c.stderr)
	}
	if !res.Success {
		if res.ExitCode > 0 {
			return res.ExitCode
		}
		return exitFailure
	}
	return exitOK
}

// execSource is the code: the argument, standard input ("-", or nothing
// given and stdin not a terminal), or --file.
func execSource(args []string, file string, stdin io.Reader) (string, error) {
	switch {
	case len(args) == 1 && file != "":
		return "", errors.New("give the code as an argument or with --file, not both")
	case len(args) == 1 && args[0] != "-":
		return args[0], nil
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", err
		}
		defer f.Close()
		return readCode(f)
	case len(args) == 0:
		if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return "", errors.New("no code given: give it as an argument, with --file, or on standard input (-)")
		}
	}
	return readCode(stdin)
}

func readCode(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxClientCode+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxClientCode {
		return "", fmt.Errorf("the code is larger than %d MiB", maxClientCode>>20)
	}
	return string(b), nil
}
