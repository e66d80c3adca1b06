package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// Rules narrow one sandbox's egress inside the operator's Policy: a
// destination must pass the Policy first, then the Rules. They can only
// take away; nothing in them reaches a host the Policy does not list.
// Their meaning is E2B's network options':
//   - a destination that matches AllowOut is allowed;
//   - else one whose address falls in DenyOut is refused;
//   - else it is allowed.
//
// So DenyOut "0.0.0.0/0" with AllowOut "api.example.com" lets the sandbox
// reach only api.example.com. The zero Rules take nothing away.
type NetworkRules struct {
	// AllowOut lists CIDR blocks ("10.1.0.0/16"), addresses ("1.1.1.1"),
	// names ("api.example.com") and "*.suffix" wildcards, which match
	// every name under the suffix but not the suffix itself.
	AllowOut []string `json:"allow_out,omitempty" doc:"Destinations let through: names, *.suffix wildcards, addresses, CIDR blocks." jsonschema:"Destinations let through: names, *.suffix wildcards, addresses, CIDR blocks."`
	// DenyOut lists CIDR blocks and addresses: a name is resolved by the
	// proxy, so it is the address that is denied ("0.0.0.0/0" denies all).
	DenyOut []string `json:"deny_out,omitempty" doc:"Addresses and CIDR blocks refused unless allow_out lets them through." jsonschema:"Addresses and CIDR blocks refused unless allow_out lets them through."`
}

// Caps on what a sandbox's owner may set: rules are stored with the
// session and checked on every connection.
const (
	MaxRuleEntries = 256
	maxRuleEntry   = 260 // a 253-byte name and a port's worth of slack
)

// AllTraffic is the entry that denies (or allows) every IPv4 address;
// DenyAll adds IPv6's.
const AllTraffic = "0.0.0.0/0"

// DenyAll is what a sandbox without internet access gets.
func DenyAll() NetworkRules { return NetworkRules{DenyOut: []string{AllTraffic, "::/0"}} }

// IsZero reports whether r takes nothing away.
func (r NetworkRules) IsZero() bool { return len(r.AllowOut) == 0 && len(r.DenyOut) == 0 }

// compiledRules are Rules parsed once, for every connection to use.
type compiledRules struct {
	allowNets  []netip.Prefix
	allowNames []entry // kindName or kindWildcard, no port
	denyNets   []netip.Prefix
}

// Check parses r, naming every bad entry in one error.
func (r NetworkRules) Check() error {
	_, err := r.compile()
	return err
}

// Normalized returns r with each entry in its canonical form, in the
// order given, as Check accepted it.
func (r NetworkRules) Normalized() (NetworkRules, error) {
	if _, err := r.compile(); err != nil {
		return NetworkRules{}, err
	}
	var out NetworkRules
	for _, raw := range r.AllowOut {
		if p, ok, _ := parseNet(raw); ok {
			out.AllowOut = append(out.AllowOut, prefixString(p))
		} else if e, err := parseRuleName(raw); err == nil {
			out.AllowOut = append(out.AllowOut, e.String())
		}
	}
	for _, raw := range r.DenyOut {
		if p, ok, _ := parseNet(raw); ok {
			out.DenyOut = append(out.DenyOut, prefixString(p))
		}
	}
	return out, nil
}

func (r NetworkRules) compile() (*compiledRules, error) {
	var errs []error
	if len(r.AllowOut) > MaxRuleEntries || len(r.DenyOut) > MaxRuleEntries {
		return nil, fmt.Errorf("egress rules: at most %d entries in allow_out and in deny_out (got %d and %d)",
			MaxRuleEntries, len(r.AllowOut), len(r.DenyOut))
	}
	c := &compiledRules{}
	for _, raw := range r.AllowOut {
		if p, ok, err := parseNet(raw); err != nil {
			errs = append(errs, fmt.Errorf("allow_out: %w", err))
		} else if ok {
			c.allowNets = append(c.allowNets, p)
		} else if e, err := parseRuleName(raw); err != nil {
			errs = append(errs, fmt.Errorf("allow_out: %w", err))
		} else {
			c.allowNames = append(c.allowNames, e)
		}
	}
	for _, raw := range r.DenyOut {
		p, ok, err := parseNet(raw)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("deny_out: %w", err))
		case !ok:
			errs = append(errs, fmt.Errorf("deny_out: %q is neither an address nor a CIDR block (names are resolved by the proxy: deny their addresses, or deny all and allow the names wanted)", clip(raw)))
		case p.Bits() == 0:
			// "All traffic" (E2B's 0.0.0.0/0) means every family: one
			// proxy carries both, and the sandbox must not slip out by
			// IPv6.
			c.denyNets = append(c.denyNets, netip.PrefixFrom(netip.IPv4Unspecified(), 0), netip.PrefixFrom(netip.IPv6Unspecified(), 0))
		default:
			c.denyNets = append(c.denyNets, p)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("egress rules: %w", err)
	}
	return c, nil
}

// parseNet parses an address or a CIDR block; ok is false for anything
// that is neither (a name, to be parsed as one).
func parseNet(raw string) (p netip.Prefix, ok bool, err error) {
	if len(raw) > maxRuleEntry || !utf8.ValidString(raw) {
		return p, false, fmt.Errorf("%q is not a destination", clip(raw))
	}
	s := strings.TrimSpace(raw)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Zone() != "" {
			return p, false, fmt.Errorf("%q is not a CIDR block", clip(raw))
		}
		return netip.PrefixFrom(p.Addr().Unmap(), unmappedBits(p)).Masked(), true, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return p, false, fmt.Errorf("%q: scoped IPv6 addresses are not supported", clip(raw))
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true, nil
	}
	return p, false, nil
}

// unmappedBits keeps a v4-mapped prefix's length meaningful for IPv4.
func unmappedBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return max(p.Bits()-96, 0)
	}
	return p.Bits()
}

// parseRuleName parses a name or "*.suffix" entry; a port has no place in
// a rule (E2B's rules have none).
func parseRuleName(raw string) (entry, error) {
	s := strings.TrimSpace(raw)
	e, err := parseEntry(s)
	if err != nil {
		why := strings.TrimPrefix(err.Error(), fmt.Sprintf("egress: allow entry %q: ", s))
		return entry{}, fmt.Errorf("%q: %s", clip(raw), why)
	}
	if e.port != 0 || e.kind == kindIP {
		return entry{}, fmt.Errorf("%q: a rule names a host, an address or a CIDR block, without a port", clip(raw))
	}
	return e, nil
}

// allows reports whether the rules let the sandbox reach addr, asked for
// as t; reason says which entry decided, for a refusal.
func (c *compiledRules) allows(t target, addr netip.Addr) (ok bool, reason string) {
	if c == nil {
		return true, ""
	}
	for _, p := range c.allowNets {
		if p.Contains(addr) {
			return true, ""
		}
	}
	for _, e := range c.allowNames {
		if e.matchesHost(t) {
			return true, ""
		}
	}
	for _, p := range c.denyNets {
		if p.Contains(addr) {
			return false, fmt.Sprintf("%s is denied by the sandbox's network rules (deny_out %s)", addr, prefixString(p))
		}
	}
	return true, ""
}

// prefixString writes a single address without its /32 or /128.
func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// clip bounds an entry quoted back in an error.
func clip(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "?") + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
