package egress

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Credential is a secret the proxy adds to a sandbox's HTTPS requests to
// one host, so the code never holds it: either a header set to Value
// ("Authorization" to "Bearer sk-..."), or a Placeholder that the code
// sends in a header and the proxy replaces by Value. Plain HTTP never
// gets a credential, nor do hosts it does not name: a redirect elsewhere
// is a new request, matched again.
type Credential struct {
	// Name identifies the binding in logs and the audit log; the value
	// never appears there.
	Name string
	// Host is an exact name ("api.example.com") or a "*.suffix" wildcard
	// (subdomains at any depth, not the suffix itself). An exact match
	// wins over wildcards, and the longest wildcard over shorter ones;
	// credentials of different hosts are never merged (E2B's rules).
	Host string
	// Port is the destination port whose tunnels are opened; 0 is 443.
	// Other ports of the host are tunnelled untouched (ssh to port 22).
	Port int
	// PathPrefix, if set, limits the credential to request paths under
	// it ("/v1/"); a path that is not in canonical form never matches.
	PathPrefix string
	// Methods, if set, limits the credential to these methods.
	Methods []string
	// Header is the header to set, replacing one the request carries.
	Header string
	// Placeholder is the string to replace in the request's header values
	// (Header empty).
	Placeholder string
	// Value is the secret.
	Value string
}

// Caps on credentials: they are checked on every request.
const (
	MaxCredentials     = 64
	maxCredentialValue = 8 << 10
)

// Check reports what is wrong with c, never quoting its value.
func (c Credential) Check() error {
	if _, err := compileCredential(c); err != nil {
		return fmt.Errorf("egress credential %q: %w", clip(c.Name), err)
	}
	return nil
}

// compiledCredential is a Credential parsed once.
type compiledCredential struct {
	Credential
	host entry // kindName or kindWildcard
	port int
}

func compileCredential(c Credential) (*compiledCredential, error) {
	h, err := parseRuleName(c.Host)
	if err != nil {
		return nil, fmt.Errorf("host: %w (a credential names a host or *.suffix)", err)
	}
	port := c.Port
	if port == 0 {
		port = 443
	}
	if port < 1 || port > 65535 {
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
	case c.Value == "" || len(c.Value) > maxCredentialValue:
		return nil, fmt.Errorf("the value must be 1 to %d bytes", maxCredentialValue)
	case !httpguts.ValidHeaderFieldValue(c.Value) || strings.ContainsAny(c.Value, "\r\n"):
		return nil, errors.New("the value holds characters a header value may not (line breaks, control characters)")
	case c.PathPrefix != "" && (!strings.HasPrefix(c.PathPrefix, "/") || len(c.PathPrefix) > 1024):
		return nil, errors.New("path_prefix must start with / (at most 1024 bytes)")
	}
	for _, m := range c.Methods {
		if !httpguts.ValidHeaderFieldName(m) || m == http.MethodConnect {
			return nil, fmt.Errorf("method %q is not a request method", clip(m))
		}
	}
	return &compiledCredential{Credential: c, host: h, port: port}, nil
}

// reservedHeader: headers that frame the message or address the proxy.
func reservedHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Connection", "Content-Length", "Transfer-Encoding", "Te", "Trailer", "Upgrade", "Keep-Alive":
		return true
	}
	return len(name) >= 6 && strings.EqualFold(name[:6], "proxy-")
}

// credentialSet is a sandbox's credentials, compiled.
type credentialSet struct {
	list []*compiledCredential
}

// compileCredentials checks every credential, naming each bad one.
func compileCredentials(list []Credential) (*credentialSet, error) {
	if len(list) > MaxCredentials {
		return nil, fmt.Errorf("egress credentials: at most %d (got %d)", MaxCredentials, len(list))
	}
	set := &credentialSet{}
	var errs []error
	for _, c := range list {
		cc, err := compileCredential(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("egress credential %q: %w", clip(c.Name), err))
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
		if c.port != t.port || !c.host.matchesHost(t) {
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

// add puts c's value into r's headers; it reports whether it did.
func (c *compiledCredential) add(h http.Header) bool {
	if c.Header != "" {
		h.Set(c.Header, c.Value)
		return true
	}
	added := false
	for k, vv := range h {
		for i, v := range vv {
			if strings.Contains(v, c.Placeholder) {
				h[k][i] = strings.ReplaceAll(v, c.Placeholder, c.Value)
				added = true
			}
		}
	}
	return added
}
