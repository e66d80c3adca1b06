package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/config"
)

// restClient calls a running server's REST API for the client commands
// (sessions, snapshots): it sends requests as they are and hands back the
// server's JSON; every decision stays with the server.
type restClient struct {
	base string // scheme://host[:port][/prefix], without a trailing slash
	key  string
	http *http.Client
}

// maxAnswer bounds what is read of one answer: an execution's result holds
// its output (capped by the server) and its figures.
const maxAnswer = 256 << 20

// defaultServerURL is where `codecage serve` listens by default.
func defaultServerURL() string {
	return "http://" + config.DefaultConfig().Listen
}

// newRESTClient checks the server's URL: http or https, with a host.
func newRESTClient(rawURL, key string) (*restClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("the server URL %q is not an http:// or https:// URL such as %s", rawURL, defaultServerURL())
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = dialer.DialContext
	// An execution may take as long as its timeout allows: no overall
	// deadline, only on connecting (the dialer's) and the TLS handshake.
	tr.TLSHandshakeTimeout = 10 * time.Second
	return &restClient{base: strings.TrimRight(u.String(), "/"), key: key, http: &http.Client{Transport: tr}}, nil
}

// serverError is the server's answer to a request it refused: its problem
// document's kind, detail and field errors.
type serverError struct {
	Status     int
	Kind       string
	Detail     string
	Fields     []string // "body.count: expected number <= 100"
	RetryAfter int
	raw        json.RawMessage // the problem document as the server sent it
}

func (e *serverError) Error() string {
	msg := e.Kind
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if len(e.Fields) > 0 {
		msg += " (" + strings.Join(e.Fields, "; ") + ")"
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf("; retry after %d s", e.RetryAfter)
	}
	return msg
}

// unreachableError is a server that did not answer: down, a wrong address,
// or not a codecage server.
type unreachableError struct {
	url, why string
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach a codecage server at %s: %s (start one with \"codecage serve\", or set --url or CODECAGE_URL)", e.url, e.why)
}

// do sends method path (with query) and body (JSON, when not nil) and
// returns the server's JSON answer (nil for 204), or a *serverError or an
// *unreachableError.
func (c *restClient) do(ctx context.Context, method, path string, query url.Values, body any) (json.RawMessage, error) {
	target := c.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &unreachableError{url: c.base, why: dialReason(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, &unreachableError{url: c.base, why: "the answer was cut: " + dialReason(err)}
	}
	if len(data) > maxAnswer {
		return nil, fmt.Errorf("the server's answer is larger than %d MiB", maxAnswer>>20)
	}
	if resp.StatusCode == http.StatusNoContent {
		return nil, nil
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 && json.Valid(data) {
		return data, nil
	}
	if p, ok := problemOf(resp.StatusCode, data); ok {
		return nil, p
	}
	return nil, &unreachableError{url: c.base, why: fmt.Sprintf("%s %s answered %s with %s, not a codecage answer",
		method, path, resp.Status, quoteStart(data))}
}

// problemOf reads an RFC 9457 problem document of the server.
func problemOf(status int, data []byte) (*serverError, bool) {
	var p struct {
		Kind       string `json:"kind"`
		Type       string `json:"type"`
		Detail     string `json:"detail"`
		Title      string `json:"title"`
		RetryAfter int    `json:"retry_after"`
		Errors     []struct {
			Location string `json:"location"`
			Message  string `json:"message"`
		} `json:"errors"`
	}
	if status < 400 || json.Unmarshal(data, &p) != nil || (p.Kind == "" && p.Type == "") {
		return nil, false
	}
	e := &serverError{Status: status, Kind: p.Kind, Detail: p.Detail, RetryAfter: p.RetryAfter, raw: data}
	if e.Kind == "" {
		e.Kind = strings.TrimPrefix(p.Type, "urn:codecage:problem:")
	}
	if e.Detail == "" {
		e.Detail = p.Title
	}
	for _, f := range p.Errors {
		e.Fields = append(e.Fields, strings.TrimPrefix(f.Location+": ", ": ")+f.Message)
	}
	return e, true
}

// dialReason says in a few words why a request got no answer, without
// the transport's nesting of wrapped errors.
func dialReason(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dns):
		return "no such host (" + dns.Name + ")"
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return "timed out"
	case errors.As(err, &op) && op.Err != nil:
		return op.Err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// quoteStart quotes the start of an answer that is not the server's.
func quoteStart(b []byte) string {
	if len(b) == 0 {
		return "an empty body"
	}
	const n = 80
	if len(b) > n {
		return fmt.Sprintf("%q…", b[:n])
	}
	return fmt.Sprintf("%q", b)
}

// idPath is an id as one segment of an API path: escaped, so that an id
// such as "a/b" or "x?y" stays an id and names no other route.
func idPath(id string) string { return url.PathEscape(id) }
