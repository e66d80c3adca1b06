package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Binding says where the proxy adds a secret to a sandbox's HTTPS
// requests, so the code never holds it: a header set to Prefix and the
// secret ("Authorization": "Bearer sk-..."), or a Placeholder that the
// code sends in a header and the proxy replaces by the secret. Plain HTTP
// never gets a credential, nor do hosts it does not name: a redirect
// elsewhere is a new request, matched again. The secret is named, never
// held: the proxy asks for its value when a tunnel to the host opens.
type Binding struct {
	// Name identifies the binding in logs and the audit log ("" is Secret).
	Name string `json:"name,omitempty" doc:"The binding's name in logs and the audit log (default: the secret's)." jsonschema:"The binding's name in logs and the audit log (default: the secret's)."`
	// Secret names the stored secret whose value is added.
	Secret string `json:"secret" doc:"The name of a stored secret (POST /secrets) whose value is added." jsonschema:"The name of a stored secret (create_secret) whose value is added."`
	// Host is an exact name ("api.example.com") or a "*.suffix" wildcard
	// (subdomains at any depth, not the suffix itself). An exact match
	// wins over wildcards, and the longest wildcard over shorter ones;
	// bindings of different hosts are never merged (E2B's rules).
	Host string `json:"host" doc:"An exact host name, or *.suffix for its subdomains (not the suffix itself)." jsonschema:"An exact host name, or *.suffix for its subdomains (not the suffix itself)."`
	// Port, if set, is the one destination port whose tunnels are
	// opened; 0 is any port whose client begins with TLS. A tunnel whose
	// client does not (ssh, whose server speaks first) is spliced
	// untouched.
	Port int `json:"port,omitempty" doc:"Only tunnels to this port (default: any port, where the client begins with TLS; other protocols pass untouched)." jsonschema:"Only tunnels to this port (default: any port, where the client begins with TLS; other protocols pass untouched)."`
	// PathPrefix, if set, limits the binding to request paths under it
	// ("/v1/"); a path that is not in canonical form never matches.
	PathPrefix string `json:"path_prefix,omitempty" doc:"Only requests whose path starts with this (in canonical form)." jsonschema:"Only requests whose path starts with this (in canonical form)."`
	// Methods, if set, limits the binding to these methods.
	Methods []string `json:"methods,omitempty" doc:"Only requests of these methods (default: all)." jsonschema:"Only requests of these methods (default: all)."`
	// Header is the header to set, replacing one the request carries, to
	// Prefix and the secret.
	Header string `json:"header,omitempty" doc:"The header to set (replacing the request's), to prefix + the secret." jsonschema:"The header to set (replacing the request's), to prefix + the secret."`
	Prefix string `json:"prefix,omitempty" doc:"Written before the secret in header (\"Bearer \")." jsonschema:"Written before the secret in header (for example 'Bearer ')."`
	// Placeholder is the string to replace in the request's header values
	// by the secret (Header empty).
	Placeholder string `json:"placeholder,omitempty" doc:"Instead of header: this string, wherever the request's headers carry it, is replaced by the secret." jsonschema:"Instead of header: this string, wherever the request's headers carry it, is replaced by the secret."`
}

// SecretFunc gives a secret's value by name.
type SecretFunc func(ctx context.Context, secret string) (string, error)

// MaxBindings caps a sandbox's bindings: they are matched on every tunnel.
const MaxBindings = 64

// Label is the binding's name in logs.
func (c Binding) Label() string { return cmp.Or(c.Name, c.Secret) }

// Check reports what is wrong with c.
func (c Binding) Check() error {
	if _, err := compileCredential(c); err != nil {
		return fmt.Errorf("egress credential %q: %w", clip(c.Label()), err)
	}
	return nil
}

// CheckBindings checks a sandbox's bindings, naming each bad one.
func CheckBindings(list []Binding) error {
	_, err := compileCredentials(list)
	return err
}

// compiledCredential is a Binding parsed once.
type compiledCredential struct {
	Binding
	host entry // kindName or kindWildcard
	port int
	// operator: the operator's binding, its secret from the operator's
	// store, not the sandbox's.
	operator bool
}

func compileCredential(c Binding) (*compiledCredential, error) {
	if _, ok, _ := parseNet(c.Host); ok {
		return nil, fmt.Errorf("host %q: a credential names a host (api.example.com) or *.suffix, not an address: its tunnel's certificate is for a name", clip(c.Host))
	}
	h, err := parseRuleName(c.Host)
	if err != nil {
		return nil, fmt.Errorf("host: %w (a credential names a host or *.suffix)", err)
	}
	port := c.Port
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("port %d is not a port", c.Port)
	}
	switch {
	case (c.Header == "") == (c.Placeholder == ""):
		return nil, errors.New("set exactly one of header (a header to set) and placeholder (a string to replace in the request's headers)")
	case c.Header != "" && !httpguts.ValidHeaderFieldName(c.Header):
		return nil, fmt.Errorf("header %q is not a header name", clip(c.Header))
	case c.Header != "" && reservedHeader(c.Header):
		return nil, fmt.Errorf("header %q belongs to the connection or the proxy, not to a credential", clip(c.Header))
	case c.Placeholder != "" && (len(c.Placeholder) < 8 || len(c.Placeholder) > 256 || !httpguts.ValidHeaderFieldValue(c.Placeholder)):
		return nil, errors.New("a placeholder is 8 to 256 characters a header value may hold (short ones would match by chance)")
	case c.Secret == "" || len(c.Secret) > 256:
		return nil, errors.New("secret names the stored secret to add")
	case c.Header == "" && c.Prefix != "":
		return nil, errors.New("prefix goes with header")
	case len(c.Prefix) > 256 || !httpguts.ValidHeaderFieldValue(c.Prefix):
		return nil, errors.New("prefix is at most 256 characters a header value may hold")
	case len(c.Name) > 128:
		return nil, errors.New("name is at most 128 bytes")
	case c.PathPrefix != "" && (!strings.HasPrefix(c.PathPrefix, "/") || len(c.PathPrefix) > 1024):
		return nil, errors.New("path_prefix must start with / (at most 1024 bytes)")
	}
	for _, m := range c.Methods {
		if !httpguts.ValidHeaderFieldName(m) || m == http.MethodConnect {
			return nil, fmt.Errorf("method %q is not a request method", clip(m))
		}
	}
	return &compiledCredential{Binding: c, host: h, port: port}, nil
}

// reservedHeader: headers that frame the message or address the proxy.
func reservedHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Connection", "Content-Length", "Transfer-Encoding", "Te", "Trailer", "Upgrade", "Keep-Alive":
		return true
	}
	return len(name) >= 6 && strings.EqualFold(name[:6], "proxy-")
}

// credentialSet is a sandbox's bindings, compiled, and where their
// secrets come from.
type credentialSet struct {
	list              []*compiledCredential
	resolve, operator SecretFunc
}

// compileCredentials checks every binding, naming each bad one.
func compileCredentials(list []Binding) (*credentialSet, error) {
	if len(list) > MaxBindings {
		return nil, fmt.Errorf("egress credentials: at most %d (got %d)", MaxBindings, len(list))
	}
	set := &credentialSet{}
	var errs []error
	for _, c := range list {
		cc, err := compileCredential(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("egress credential %q: %w", clip(c.Label()), err))
			continue
		}
		set.list = append(set.list, cc)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return set, nil
}

// forHost is the credentials that may apply to tunnels to t: those of the
// exact name, else those of the longest wildcard that covers it.
func (s *credentialSet) forHost(t target) []*compiledCredential {
	if s == nil || t.ip.IsValid() {
		return nil
	}
	var out []*compiledCredential
	best := -1
	for _, c := range s.list {
		if (c.port != 0 && c.port != t.port) || !c.host.matchesHost(t) {
			continue
		}
		rank := len(c.host.name)
		if c.host.kind == kindName {
			rank = 1 << 20
		}
		switch {
		case rank > best:
			best, out = rank, []*compiledCredential{c}
		case rank == best:
			out = append(out, c)
		}
	}
	return out
}

// applies reports whether c goes with request r.
func (c *compiledCredential) applies(r *http.Request) bool {
	if len(c.Methods) > 0 && !slices.Contains(c.Methods, r.Method) {
		return false
	}
	if c.PathPrefix == "" {
		return true
	}
	p := r.URL.Path
	// "/v1/../admin" would match "/v1/" here and reach /admin there.
	if p == "" || cleanPath(p) != p || strings.Contains(strings.ToLower(r.URL.RawPath), "%2f") {
		return false
	}
	return strings.HasPrefix(p, c.PathPrefix) || p+"/" == c.PathPrefix
}

// cleanPath is path.Clean keeping a trailing slash.
func cleanPath(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// valueOK: a secret goes into a header value, whole.
func valueOK(v string) bool {
	return v != "" && httpguts.ValidHeaderFieldValue(v) && !strings.ContainsAny(v, "\r\n")
}

// add puts c with its secret into h; it reports whether it did.
func (c *compiledCredential) add(h http.Header, secret string) bool {
	if c.Header != "" {
		h.Set(c.Header, c.Prefix+secret)
		return true
	}
	added := false
	for k, vv := range h {
		for i, v := range vv {
			if strings.Contains(v, c.Placeholder) {
				h[k][i] = strings.ReplaceAll(v, c.Placeholder, secret)
				added = true
			}
		}
	}
	return added
}
