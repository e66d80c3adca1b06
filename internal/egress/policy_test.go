package egress

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ---- policy parsing -------------------------------------------------------

func TestParsePolicyGood(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,, ", nil},
		{"api.github.com", []string{"api.github.com"}},
		{" api.github.com , *.PyPI.org ,, files.pythonhosted.org. ",
			[]string{"api.github.com", "*.pypi.org", "files.pythonhosted.org"}},
		{"Example.COM:443, *.example.com:8443, *.example.net.",
			[]string{"example.com:443", "*.example.com:8443", "*.example.net"}},
		{"127.0.0.1, 127.0.0.1:8080, 0x7f.example", []string{"127.0.0.1", "127.0.0.1:8080", "0x7f.example"}},
		{"::1, [::1], [::1]:443, 2001:DB8::1, [2001:0db8::2]:8443",
			[]string{"::1", "::1", "[::1]:443", "2001:db8::1", "[2001:db8::2]:8443"}},
		{"::ffff:10.0.0.1, [::ffff:10.0.0.2]:80", []string{"10.0.0.1", "10.0.0.2:80"}},
		{"_acme-challenge.example.com, xn--bcher-kva.de, localhost, a:65535, b:1",
			[]string{"_acme-challenge.example.com", "xn--bcher-kva.de", "localhost", "a:65535", "b:1"}},
		{"*.com", []string{"*.com"}},
	}
	for _, c := range cases {
		p, err := ParsePolicy(c.in)
		if err != nil {
			t.Errorf("ParsePolicy(%q): %v", c.in, err)
			continue
		}
		if !slices.Equal(p.Allow, c.want) {
			t.Errorf("ParsePolicy(%q) = %q, want %q", c.in, p.Allow, c.want)
		}
		// The canonical form parses to itself.
		again, err := ParsePolicy(strings.Join(p.Allow, ","))
		if err != nil || !slices.Equal(again.Allow, p.Allow) {
			t.Errorf("reparsing %q = %q, %v", p.Allow, again.Allow, err)
		}
	}
}

func TestParsePolicyBad(t *testing.T) {
	cases := []struct{ in, want string }{
		{"*foo", "'*' must be the whole leading label"},
		{"*", "'*' must be the whole leading label"},
		{"foo*.com", "'*' must be the whole leading label"},
		{"a.*.b", "'*' must be the whole leading label"},
		{"*.*.b", "'*' is allowed only once"},
		{"*.", "empty host name"},
		{"a..b", "empty label"},
		{".a.com", "empty label"},
		{"a.com..", "empty label"},
		{"host:99999", `port "99999"`},
		{"host:0", `port "0"`},
		{"host:+80", `port "+80"`},
		{"host:http", `port "http"`},
		{"host:", "empty port"},
		{"host:80:90", "not a valid IPv6 address"},
		{"[::1", "missing ']'"},
		{"[::1]x", "unexpected"},
		{"[::1]:", "empty port"},
		{"[1.2.3.4]:80", "only IPv6 addresses go in brackets"},
		{"[foo]:80", "is not an IPv6 address"},
		{"1:2:3", "not a valid IPv6 address"},
		{"fe80::1%eth0", "scoped"},
		{"bücher.de", "not ASCII"},
		{"\u212aelvin.com", "not ASCII"}, // Kelvin sign lowercases to 'k'
		{"a b.com", "invalid character"},
		{"a/b.com", "invalid character"},
		{"-a.com", "starts or ends with '-'"},
		{"a-.com", "starts or ends with '-'"},
		{"127.1", "looks like an IP address"},
		{"017.0.0.1", "looks like an IP address"},
		{"1.2.3.256", "looks like an IP address"},
		{"*.10.0.0.1", "looks like an IP address"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{strings.Repeat("abcdefghi.", 26) + "com", "longer than 253"},
	}
	for _, c := range cases {
		p, err := ParsePolicy("ok.example.com, " + c.in)
		if err == nil {
			t.Errorf("ParsePolicy(%q) = %q, want error containing %q", c.in, p.Allow, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), strconv.Quote(c.in)) {
			t.Errorf("ParsePolicy(%q) error %q, want it to quote the entry and contain %q", c.in, err, c.want)
		}
		if p.Allow != nil {
			t.Errorf("ParsePolicy(%q) returned entries %q along with an error", c.in, p.Allow)
		}
	}
	// Every bad entry is reported, not just the first.
	_, err := ParsePolicy("*foo, good.com, a..b")
	if err == nil || !strings.Contains(err.Error(), `"*foo"`) || !strings.Contains(err.Error(), `"a..b"`) {
		t.Errorf("want both bad entries reported, got %v", err)
	}
}

func TestNewIgnoresMalformedEntries(t *testing.T) {
	var logs syncBuffer
	p := New(Policy{Allow: []string{"good.example", "*bad", "a..b"}}, Options{Logger: testLogger(&logs)})
	defer p.Close()
	if len(p.entries) != 1 || p.entries[0].String() != "good.example" {
		t.Errorf("entries = %v, want only good.example", p.entries)
	}
	if n := strings.Count(logs.String(), "ignoring malformed allow entry"); n != 2 {
		t.Errorf("want 2 warnings about malformed entries, got %d:\n%s", n, logs.String())
	}
}

// ---- matching ---------------------------------------------------------------

func TestLookup(t *testing.T) {
	pol, err := ParsePolicy("api.github.com, *.pypi.org, example.com:443, 10.1.2.3, 192.0.2.1:8080, " +
		"[2001:db8::1]:443, *.svc.test:8443, *.example.org, api.example.org")
	if err != nil {
		t.Fatal(err)
	}
	entries, errs := compile(pol)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cases := []struct {
		host, port string
		want       string // matching entry, "" for none
		explicit   bool
		portDenied bool
	}{
		{"api.github.com", "443", "api.github.com", true, false},
		{"API.GitHub.COM", "80", "api.github.com", true, false},
		{"api.github.com.", "443", "api.github.com", true, false},
		{"github.com", "443", "", false, false},
		{"x.api.github.com", "443", "", false, false}, // exact entries do not cover subdomains
		{"files.pypi.org", "443", "*.pypi.org", false, false},
		{"FILES.PyPI.org.", "443", "*.pypi.org", false, false},
		{"a.b.pypi.org", "80", "*.pypi.org", false, false},
		{"pypi.org", "443", "", false, false}, // the wildcard does not match its apex
		{"evilpypi.org", "443", "", false, false},
		{"pypi.org.evil.com", "443", "", false, false},
		{"example.com", "443", "example.com:443", true, false},
		{"example.com", "80", "", false, true},
		{"www.example.com", "443", "", false, false},
		{"10.1.2.3", "22", "10.1.2.3", true, false},
		{"::ffff:10.1.2.3", "22", "10.1.2.3", true, false},
		{"10.1.2.4", "22", "", false, false},
		{"192.0.2.1", "8080", "192.0.2.1:8080", true, false},
		{"192.0.2.1", "8081", "", false, true},
		{"2001:db8::1", "443", "[2001:db8::1]:443", true, false},
		{"2001:0DB8:0:0::1", "443", "[2001:db8::1]:443", true, false},
		{"2001:db8::1", "80", "", false, true},
		{"x.svc.test", "8443", "*.svc.test:8443", false, false},
		{"x.svc.test", "443", "", false, true},
		{"www.example.org", "443", "*.example.org", false, false},
		{"api.example.org", "443", "api.example.org", true, false}, // exact wins over wildcard
	}
	for _, c := range cases {
		tg, err := parseTarget(c.host, c.port)
		if err != nil {
			t.Errorf("parseTarget(%q, %q): %v", c.host, c.port, err)
			continue
		}
		e, ok, portDenied := lookup(entries, tg)
		got := ""
		if ok {
			got = e.String()
		}
		if got != c.want || (ok && e.explicit() != c.explicit) || portDenied != c.portDenied {
			t.Errorf("lookup(%s:%s) = %q explicit=%v portDenied=%v, want %q explicit=%v portDenied=%v",
				c.host, c.port, got, ok && e.explicit(), portDenied, c.want, c.explicit, c.portDenied)
		}
	}
	// Nothing matches an empty policy.
	tg, _ := parseTarget("example.com", "443")
	if _, ok, _ := lookup(nil, tg); ok {
		t.Error("empty policy allowed example.com")
	}
}

func TestParseTargetBad(t *testing.T) {
	cases := []struct{ host, port, want string }{
		{"bücher.de", "443", "not ASCII"},
		{"a..b", "443", "empty label"},
		{"fe80::1%eth0", "443", "scoped"},
		{"127.1", "80", "looks like an IP"},
		{"", "80", "empty host"},
		{"a.com", "0", "port"},
		{"a.com", "65536", "port"},
		{"a.com", "x", "port"},
		{"a.com", "", "port"},
		{"evil.com\r\nX: y", "80", "invalid character"},
	}
	for _, c := range cases {
		if _, err := parseTarget(c.host, c.port); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTarget(%q, %q) error = %v, want %q", c.host, c.port, err, c.want)
		}
	}
}

// ---- address classification ----------------------------------------------

func TestAddrClass(t *testing.T) {
	cases := []struct{ addr, want string }{
		{"8.8.8.8", classPublic},
		{"1.1.1.1", classPublic},
		{"100.63.255.255", classPublic},
		{"100.128.0.0", classPublic},
		{"172.32.0.1", classPublic},
		{"172.15.255.255", classPublic},
		{"0.0.0.0", classUnspecified},
		{"0.1.2.3", classThisNetwork},
		{"10.0.0.1", classPrivate},
		{"10.255.255.255", classPrivate},
		{"100.64.0.1", classCGNAT},
		{"127.0.0.1", classLoopback},
		{"127.255.255.254", classLoopback},
		{"169.254.169.254", classLinkLocal},
		{"172.16.0.1", classPrivate},
		{"172.31.255.255", classPrivate},
		{"192.168.1.1", classPrivate},
		{"192.0.0.8", classReserved},
		{"192.0.2.5", classDocumentation},
		{"198.18.0.1", classBenchmarking},
		{"198.51.100.7", classDocumentation},
		{"203.0.113.9", classDocumentation},
		{"224.0.0.1", classMulticast},
		{"239.255.255.250", classMulticast},
		{"240.0.0.1", classReserved},
		{"255.255.255.255", classBroadcast},

		{"::", classUnspecified},
		{"::1", classLoopback},
		{"::ffff:127.0.0.1", classLoopback},
		{"::ffff:10.0.0.1", classPrivate},
		{"::ffff:169.254.169.254", classLinkLocal},
		{"::ffff:0.0.0.0", classUnspecified},
		{"::ffff:8.8.8.8", classPublic},
		{"::127.0.0.1", classReserved}, // IPv4-compatible, deprecated
		{"fc00::1", classPrivate},
		{"fd00:ec2::254", classPrivate},
		{"fe80::1", classLinkLocal},
		{"fe80::1%eth0", classLinkLocal},
		{"fec0::1", classPrivate},
		{"ff02::1", classMulticast},
		{"2001:db8::1", classDocumentation},
		{"2001::1", classReserved}, // Teredo
		{"100::1", classReserved},
		{"4000::1", classReserved},
		{"2606:4700:4700::1111", classPublic},
		{"2a00:1450:4001::1", classPublic},
		// NAT64 and 6to4 take the class of the IPv4 address they embed.
		{"64:ff9b::8.8.8.8", classPublic},
		{"64:ff9b::10.0.0.1", classPrivate},
		{"64:ff9b::127.0.0.1", classLoopback},
		{"64:ff9b::169.254.169.254", classLinkLocal},
		{"64:ff9b:1::1", classPrivate},
		{"2002:a00:1::", classPrivate},
		{"2002:7f00:1::1", classLoopback},
		{"2002:a9fe:a9fe::", classLinkLocal},
		{"2002:808:808::1", classPublic},
	}
	for _, c := range cases {
		a := netip.MustParseAddr(c.addr)
		if got := addrClass(a); got != c.want {
			t.Errorf("addrClass(%s) = %q, want %q", c.addr, got, c.want)
		}
	}
	if got := addrClass(netip.Addr{}); got != classInvalid {
		t.Errorf("addrClass(zero) = %q, want invalid", got)
	}
}

// ---- fuzzing ----------------------------------------------------------------

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"api.github.com, *.pypi.org", "[::1]:443,10.0.0.1:80", "*foo", "a..b",
		"host:99999", "::ffff:1.2.3.4", "[fe80::1%eth0]:1", "*.", "\u212a.com", " , "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			return
		}
		again, err := ParsePolicy(strings.Join(p.Allow, ","))
		if err != nil || !slices.Equal(again.Allow, p.Allow) {
			t.Fatalf("canonical form %q reparses as %q, %v", p.Allow, again.Allow, err)
		}
	})
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"example.com", "EXAMPLE.com.", "::ffff:127.0.0.1", "127.1", "bücher.de", "a..b"} {
		f.Add(s, "443")
	}
	f.Fuzz(func(t *testing.T, host, port string) {
		tg, err := parseTarget(host, port)
		if err != nil {
			return
		}
		if tg.port < 1 || tg.port > 65535 {
			t.Fatalf("port %d accepted", tg.port)
		}
		if tg.ip.IsValid() == (tg.name != "") {
			t.Fatalf("target %+v is neither or both name and IP", tg)
		}
		if tg.name != "" && checkName(tg.name) != nil {
			t.Fatalf("name %q accepted but invalid", tg.name)
		}
		if tg.ip.Is4In6() || tg.ip.Zone() != "" {
			t.Fatalf("address %v not normalized", tg.ip)
		}
	})
}
