package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Policy decides which destinations a sandbox may reach.
//
// The zero Policy allows nothing: egress is opt-in, entry by entry.
type Policy struct {
	// Allow lists host patterns:
	//   - exact names ("api.github.com");
	//   - "*.suffix" wildcards ("*.pypi.org" matches "files.pypi.org" and
	//     "a.b.pypi.org" but not "pypi.org");
	//   - literal IPs ("203.0.113.7", "2001:db8::1").
	// Any entry may carry a port ("host:443", "*.example.com:443",
	// "10.0.0.1:8080", "[2001:db8::1]:443") that narrows it to that port;
	// without one every port is allowed.
	//
	// Only an exact name or an IP literal can reach a non-public address
	// (loopback, private, link-local...): a wildcard says "anything under
	// this domain on the internet", and must not become a way to reach the
	// supervisor's own network because some name under it resolves there.
	Allow []string
}

// ParsePolicy parses a comma-separated allow list, such as the value of
// SANDBOX_NETWORK_ALLOW. Pieces are trimmed, names are lowercased and lose
// a trailing dot, and empty pieces are skipped. Every malformed entry is
// reported (joined into one error), so an operator fixes them all at once;
// a policy with errors is never returned, because a half-understood policy
// is worse than none.
func ParsePolicy(allow string) (Policy, error) {
	var p Policy
	var errs []error
	for piece := range strings.SplitSeq(allow, ",") {
		piece = strings.TrimSpace(piece)
		if piece == "" {
			continue
		}
		e, err := parseEntry(piece)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Allow = append(p.Allow, e.String())
	}
	if err := errors.Join(errs...); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// entryKind says how an allow entry matches a destination host.
type entryKind uint8

const (
	kindName     entryKind = iota // exact host name
	kindWildcard                  // "*.suffix": strict subdomains of suffix
	kindIP                        // literal address
)

// entry is one parsed allow-list item.
type entry struct {
	kind entryKind
	name string     // kindName: the name; kindWildcard: the suffix after "*."
	ip   netip.Addr // kindIP, unmapped and without zone
	port int        // 0: every port
}

// String renders the entry in canonical form; ParsePolicy stores this form,
// so parsing its output again yields the same policy.
func (e entry) String() string {
	var host string
	switch e.kind {
	case kindWildcard:
		host = "*." + e.name
	case kindIP:
		host = e.ip.String()
		if e.ip.Is6() && e.port != 0 {
			host = "[" + host + "]"
		}
	default:
		host = e.name
	}
	if e.port != 0 {
		return host + ":" + strconv.Itoa(e.port)
	}
	return host
}

// explicit reports whether the entry names one destination exactly; only
// such entries unlock non-public addresses.
func (e entry) explicit() bool { return e.kind != kindWildcard }

// matchesHost reports whether the entry covers host t, ignoring the port.
func (e entry) matchesHost(t target) bool {
	switch e.kind {
	case kindIP:
		return t.ip.IsValid() && t.ip == e.ip
	case kindName:
		return !t.ip.IsValid() && t.name == e.name
	case kindWildcard:
		// The leading dot makes "*.pypi.org" miss both "pypi.org" and
		// "evilpypi.org".
		return !t.ip.IsValid() && strings.HasSuffix(t.name, "."+e.name)
	}
	return false
}

// parseEntry parses one trimmed, non-empty allow-list piece.
func parseEntry(raw string) (entry, error) {
	fail := func(format string, args ...any) (entry, error) {
		return entry{}, fmt.Errorf("egress: allow entry %q: %s", raw, fmt.Sprintf(format, args...))
	}
	// ASCII first: strings.ToLower maps some non-ASCII runes (the Kelvin
	// sign) onto ASCII letters, which would smuggle look-alikes past us.
	if !isASCII(raw) {
		return fail("not ASCII; write internationalized names in their punycode (xn--) form")
	}
	s := strings.ToLower(raw)

	host, portText, bracketed, err := splitEntry(s)
	if err != nil {
		return fail("%v", err)
	}
	var e entry
	if portText != "" {
		if e.port, err = parsePort(portText); err != nil {
			return fail("%v", err)
		}
	}

	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return fail("scoped IPv6 addresses (%%zone) are not supported")
		}
		if bracketed && !ip.Is6() {
			return fail("only IPv6 addresses go in brackets")
		}
		e.kind, e.ip = kindIP, ip.Unmap()
		return e, nil
	}
	if bracketed {
		return fail("%q is not an IPv6 address", host)
	}
	if strings.Contains(host, ":") {
		return fail("not a valid IPv6 address (write an IPv6 address with a port as [addr]:port)")
	}

	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		if strings.Contains(suffix, "*") {
			return fail("'*' is allowed only once, as the leading label (\"*.example.com\")")
		}
		suffix = strings.TrimSuffix(suffix, ".")
		if err := checkName(suffix); err != nil {
			return fail("%v", err)
		}
		e.kind, e.name = kindWildcard, suffix
		return e, nil
	}
	if strings.Contains(host, "*") {
		return fail("'*' must be the whole leading label, as in \"*.example.com\"")
	}
	name := strings.TrimSuffix(host, ".")
	if err := checkName(name); err != nil {
		return fail("%v", err)
	}
	e.kind, e.name = kindName, name
	return e, nil
}

// splitEntry splits an entry into host and optional port. IPv6 addresses
// carry colons of their own, so a port after one needs brackets; a bare
// address with several colons is taken as an address without a port.
func splitEntry(s string) (host, port string, bracketed bool, err error) {
	if rest, ok := strings.CutPrefix(s, "["); ok {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return "", "", false, errors.New("missing ']'")
		}
		host, after := rest[:end], rest[end+1:]
		if after == "" {
			return host, "", true, nil
		}
		port, ok := strings.CutPrefix(after, ":")
		if !ok {
			return "", "", false, fmt.Errorf("unexpected %q after ']'", after)
		}
		if port == "" {
			return "", "", false, errors.New("empty port")
		}
		return host, port, true, nil
	}
	if strings.Count(s, ":") > 1 {
		return s, "", false, nil
	}
	if h, p, ok := strings.Cut(s, ":"); ok {
		if p == "" {
			return "", "", false, errors.New("empty port")
		}
		return h, p, false, nil
	}
	return s, "", false, nil
}

// parsePort accepts only plain decimal ports 1-65535: strconv.Atoi alone
// would also take "+80" or "-0".
func parsePort(s string) (int, error) {
	bad := fmt.Errorf("port %q is not a number between 1 and 65535", s)
	if s == "" || len(s) > 5 {
		return 0, bad
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, bad
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, bad
	}
	return n, nil
}

// checkName validates a lowercased DNS name without a trailing dot. It is
// deliberately stricter than DNS (letters, digits, '-' and '_' only): this
// is the grammar of hosts a sandbox may legitimately reach, and everything
// outside it is more likely an attempt to confuse a parser than a real site.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty host name")
	}
	if len(name) > 253 {
		return errors.New("host name longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" {
			return errors.New("empty label (\"..\", or a leading dot)")
		}
		if len(l) > 63 {
			return fmt.Errorf("label %q is longer than 63 characters", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("invalid character %q in host name", c)
			}
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with '-'", l)
		}
	}
	// No top-level domain is numeric. A name like "127.1" or "017.0.0.1"
	// is an IP address in some parsers (inet_aton) and a name in others;
	// refusing it removes the ambiguity.
	if allDigits(labels[len(labels)-1]) {
		return errors.New("looks like an IP address but is not a valid one")
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// target is a normalized destination host and port: either a name
// (lowercase, no trailing dot) or an unmapped IP address without zone.
type target struct {
	name string
	ip   netip.Addr
	port int
}

// host is the destination host as logged and quoted in refusals.
func (t target) host() string {
	if t.ip.IsValid() {
		return t.ip.String()
	}
	return t.name
}

// parseTarget normalizes the host and port of a request the same way
// entries are normalized, so that matching is a plain comparison.
func parseTarget(host, port string) (target, error) {
	var t target
	p, err := parsePort(port)
	if err != nil {
		return t, err
	}
	t.port = p
	if host == "" {
		return t, errors.New("empty host")
	}
	if !isASCII(host) {
		return t, fmt.Errorf("host %q is not ASCII; use its punycode (xn--) form", host)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return t, fmt.Errorf("host %q: scoped IPv6 addresses are not allowed", host)
		}
		t.ip = ip.Unmap()
		return t, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if err := checkName(name); err != nil {
		return t, fmt.Errorf("host %q: %v", host, err)
	}
	t.name = name
	return t, nil
}

// compile parses every entry of p. Entries that do not parse are returned
// as errors and left out, so a hand-built Policy fails closed.
func compile(p Policy) ([]entry, []error) {
	var entries []entry
	var errs []error
	for _, raw := range p.Allow {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		e, err := parseEntry(raw)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		entries = append(entries, e)
	}
	return entries, errs
}

// lookup finds the entry that admits t. An exact entry (name or IP) wins
// over a wildcard because only it unlocks non-public addresses. portDenied
// reports that some entry names the host, but for other ports, so the
// refusal can say so.
func lookup(entries []entry, t target) (e entry, ok, portDenied bool) {
	var wild *entry
	for i := range entries {
		en := &entries[i]
		if !en.matchesHost(t) {
			continue
		}
		if en.port != 0 && en.port != t.port {
			portDenied = true
			continue
		}
		if en.explicit() {
			return *en, true, false
		}
		if wild == nil {
			wild = en
		}
	}
	if wild != nil {
		return *wild, true, false
	}
	return entry{}, false, portDenied
}
