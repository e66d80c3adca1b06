package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

const secretsUsage = `Usage:
  codecage secrets create NAME [--from-file F]
  codecage secrets list
  codecage secrets rm NAME

Clients of a running "codecage serve" (POST /secrets, GET /secrets, DELETE
/secrets/{name}), with the API key's secrets; they take --url (default
$CODECAGE_URL, else http://127.0.0.1:8001), --api-key (default
$CODECAGE_API_KEY) and --json. create reads the value from standard input
(or the file F), never from the command line, where other users' ps would
see it; a final newline is dropped. A session's egress_credentials bind a
secret to a host ("codecage sessions credentials"): the egress proxy adds it
to the session's HTTPS requests there, and the sandbox never holds it.

Exit status: 0 success; 2 bad usage; 3 the server did not answer; 4 the
server refused the request (its error kind and message are printed).
`

// secretsCmd stores, lists and deletes the API key's secrets.
func secretsCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, secretsUsage)
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	c := newClientCmd("secrets "+sub, secretsUsage, stdout, stderr)
	switch sub {
	case "create":
		return secretsCreate(c, rest, stdin)
	case "list":
		return secretsList(c, rest)
	case "rm":
		if status, ok := c.parse(rest, 1, 1, "secret name"); !ok {
			return status
		}
		if _, status, ok := c.call(http.MethodDelete, "/secrets/"+url.PathEscape(c.args[0]), nil, nil); !ok {
			return status
		}
		return exitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, secretsUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "codecage secrets: unknown subcommand %q\n\n%s", sub, secretsUsage)
	return exitUsage
}

func secretsCreate(c *clientCmd, args []string, stdin io.Reader) int {
	file := c.fs.String("from-file", "", "read the value from this file instead of standard input")
	if status, ok := c.parse(args, 1, 1, "secret name"); !ok {
		return status
	}
	in := stdin
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			status, _ := c.usageError("%v", err)
			return status
		}
		defer f.Close()
		in = f
	}
	value, err := io.ReadAll(io.LimitReader(in, 64<<10))
	if err != nil {
		status, _ := c.usageError("reading the value: %v", err)
		return status
	}
	value = bytes.TrimSuffix(bytes.TrimSuffix(value, []byte("\n")), []byte("\r"))
	data, status, ok := c.call(http.MethodPost, "/secrets", nil, api.SecretParams{Name: c.args[0], Value: string(value)})
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "stored %s\n", c.args[0])
	return exitOK
}

func secretsList(c *clientCmd, args []string) int {
	if status, ok := c.parse(args, 0, 0, ""); !ok {
		return status
	}
	data, status, ok := c.call(http.MethodGet, "/secrets", nil, nil)
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	var out struct {
		Secrets []service.SecretInfo `json:"secrets"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		fmt.Fprintf(c.stderr, "codecage %s: the server's answer is not a list of secrets: %v\n", c.name, err)
		return exitInternal
	}
	for _, s := range out.Secrets {
		fmt.Fprintf(c.stdout, "%s\t%s\n", s.Name, s.Created.Format("2006-01-02 15:04:05Z07:00"))
	}
	return exitOK
}

// sessionsCredentials is PUT /sessions/{id}/egress_credentials: the
// session's bindings replaced by the flags' (none given: cleared).
func sessionsCredentials(c *clientCmd, args []string) int {
	var binds multiFlag
	c.fs.Var(&binds, "bind", `a binding as JSON: {"secret":"NAME","host":"api.example.com","header":"Authorization","prefix":"Bearer "} (repeatable)`)
	if status, ok := c.parse(args, 1, 1, "session id"); !ok {
		return status
	}
	list := []service.EgressCredential{}
	for _, b := range binds {
		var one service.EgressCredential
		dec := json.NewDecoder(strings.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&one); err != nil {
			status, _ := c.usageError("--bind %q: %v", b, err)
			return status
		}
		list = append(list, one)
	}
	data, status, ok := c.call(http.MethodPut, "/sessions/"+idPath(c.args[0])+"/egress_credentials", nil, api.CredentialsParams{Credentials: list})
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	var out api.CredentialsParams
	if err := json.Unmarshal(data, &out); err != nil {
		fmt.Fprintf(c.stderr, "codecage %s: the server's answer is not a session's bindings: %v\n", c.name, err)
		return exitInternal
	}
	if len(out.Credentials) == 0 {
		fmt.Fprintln(c.stdout, "no egress credentials")
	}
	for _, b := range out.Credentials {
		fmt.Fprintf(c.stdout, "%s: secret %s -> %s\n", b.Label(), b.Secret, b.Host)
	}
	return exitOK
}
