package egress

import "net/netip"

// Address classes. Anything but classPublic needs an exact allow entry, and
// the classes in neverDial are refused even then.
const (
	classPublic        = ""
	classInvalid       = "invalid"
	classUnspecified   = "unspecified"
	classThisNetwork   = "this-network"
	classLoopback      = "loopback"
	classPrivate       = "private"
	classCGNAT         = "cgnat"
	classLinkLocal     = "link-local"
	classMulticast     = "multicast"
	classBroadcast     = "broadcast"
	classDocumentation = "documentation"
	classBenchmarking  = "benchmarking"
	classReserved      = "reserved"
)

// neverDial are classes that are no unicast destination at all; on Linux
// a connect to 0.0.0.0 even lands on the host itself. No entry unlocks
// them.
var neverDial = map[string]bool{
	classInvalid:     true,
	classUnspecified: true,
	classThisNetwork: true,
	classMulticast:   true,
	classBroadcast:   true,
}

type special struct {
	prefix netip.Prefix
	class  string
}

// v4Special lists the IPv4 ranges that are not the public internet (IANA
// special-purpose registry, trimmed to what matters for an egress proxy).
// The order matters only where ranges nest: the first match wins.
var v4Special = []special{
	{netip.MustParsePrefix("255.255.255.255/32"), classBroadcast},
	{netip.MustParsePrefix("0.0.0.0/32"), classUnspecified},
	{netip.MustParsePrefix("0.0.0.0/8"), classThisNetwork},
	{netip.MustParsePrefix("10.0.0.0/8"), classPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), classCGNAT},
	{netip.MustParsePrefix("127.0.0.0/8"), classLoopback},
	// Includes 169.254.169.254, the cloud metadata service: the classic
	// prize of SSRF.
	{netip.MustParsePrefix("169.254.0.0/16"), classLinkLocal},
	{netip.MustParsePrefix("172.16.0.0/12"), classPrivate},
	{netip.MustParsePrefix("192.0.0.0/24"), classReserved},
	{netip.MustParsePrefix("192.0.2.0/24"), classDocumentation},
	{netip.MustParsePrefix("192.88.99.0/24"), classReserved}, // 6to4 relay anycast, deprecated
	{netip.MustParsePrefix("192.168.0.0/16"), classPrivate},
	// Benchmarking, but also where VPNs and "fake-IP" DNS setups put
	// internal addresses.
	{netip.MustParsePrefix("198.18.0.0/15"), classBenchmarking},
	{netip.MustParsePrefix("198.51.100.0/24"), classDocumentation},
	{netip.MustParsePrefix("203.0.113.0/24"), classDocumentation},
	{netip.MustParsePrefix("224.0.0.0/4"), classMulticast},
	{netip.MustParsePrefix("240.0.0.0/4"), classReserved},
}

var v6Special = []special{
	{netip.MustParsePrefix("::/128"), classUnspecified},
	{netip.MustParsePrefix("::1/128"), classLoopback},
	{netip.MustParsePrefix("::/96"), classReserved},         // IPv4-compatible, deprecated
	{netip.MustParsePrefix("64:ff9b:1::/48"), classPrivate}, // local-use NAT64
	{netip.MustParsePrefix("100::/64"), classReserved},      // discard-only
	{netip.MustParsePrefix("2001::/23"), classReserved},     // IETF protocol assignments, Teredo
	{netip.MustParsePrefix("2001:db8::/32"), classDocumentation},
	{netip.MustParsePrefix("3fff::/20"), classDocumentation},
	{netip.MustParsePrefix("fc00::/7"), classPrivate}, // unique local, incl. fd00:ec2::254 (metadata)
	{netip.MustParsePrefix("fe80::/10"), classLinkLocal},
	{netip.MustParsePrefix("fec0::/10"), classPrivate}, // site-local, deprecated
	{netip.MustParsePrefix("ff00::/8"), classMulticast},
}

var (
	nat64Prefix   = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour     = netip.MustParsePrefix("2002::/16")
	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// addrClass returns classPublic for an address on the public internet and
// otherwise a short name for what it is instead.
//
// Addresses that embed an IPv4 address and are translated to it on the way
// (IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d, 6to4 2002:AABB:CCDD::)
// take the class of the embedded address: otherwise "::ffff:127.0.0.1" or a
// NAT64 form of 10.0.0.1 would walk past a check that only knows IPv4.
func addrClass(a netip.Addr) string {
	if !a.IsValid() {
		return classInvalid
	}
	a = a.WithZone("").Unmap()
	if a.Is4() {
		for _, s := range v4Special {
			if s.prefix.Contains(a) {
				return s.class
			}
		}
		return classPublic
	}
	b := a.As16()
	if nat64Prefix.Contains(a) {
		return addrClass(netip.AddrFrom4([4]byte(b[12:16])))
	}
	if sixToFour.Contains(a) {
		return addrClass(netip.AddrFrom4([4]byte(b[2:6])))
	}
	for _, s := range v6Special {
		if s.prefix.Contains(a) {
			return s.class
		}
	}
	// Only 2000::/3 is allocated for global unicast; everything else not
	// listed above is unassigned or special.
	if !globalUnicast.Contains(a) {
		return classReserved
	}
	return classPublic
}
