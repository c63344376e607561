package tasks

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// forbidden lists what a webhook must not reach unless allowlisted: a
// subscriber URL is supplied by a customer, and without this guard it could
// point the worker at Redis on loopback, the cloud metadata service or the
// private network behind it.
var forbidden = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network", unspecified
	netip.MustParsePrefix("10.0.0.0/8"),      // RFC 1918
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local, incl. 169.254.169.254 metadata
	netip.MustParsePrefix("172.16.0.0/12"),   // RFC 1918
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"),  // RFC 1918
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, incl. 255.255.255.255 broadcast
	netip.MustParsePrefix("::/128"),          // unspecified
	netip.MustParsePrefix("::1/128"),         // loopback
	netip.MustParsePrefix("fc00::/7"),        // unique-local
	netip.MustParsePrefix("fe80::/10"),       // link-local
	netip.MustParsePrefix("ff00::/8"),        // multicast
	netip.MustParsePrefix("2002::/16"),       // 6to4 can carry any IPv4 address
	netip.MustParsePrefix("2001::/32"),       // Teredo, likewise
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT)
	netip.MustParsePrefix("::/96"),           // deprecated IPv4-compatible, incl. :: and ::1
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// AddressAllowed reports whether the worker may connect to ip (its
// dialer asks, on every address a host name resolves to) and whether a
// subscriber URL may name it as a literal address (ValidateURLAddress). IPv4-mapped
// and NAT64 addresses are judged by the IPv4 address they carry. allowed
// CIDRs win over the built-in refusals.
func AddressAllowed(ip netip.Addr, allowed []netip.Prefix) bool {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		ip = ip.Unmap()
	} else if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	for _, p := range allowed {
		if p.Contains(ip) {
			return true
		}
	}
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsMulticast() || ip.IsUnspecified() || ip.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range forbidden {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// ParseCIDRs reads a comma-separated CIDR list such as HOOKLANE_ALLOWED_CIDRS.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// ValidateURLAddress refuses a subscriber URL whose host is a literal
// address the worker would refuse to reach (AddressAllowed with allowed,
// HOOKLANE_ALLOWED_CIDRS), so that it is refused when it is written, not
// once per event at delivery. A host name is checked where it matters: on
// every address it resolves to, when the worker dials.
func ValidateURLAddress(raw string, allowed []netip.Prefix) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil // ValidateURL names what is wrong
	}
	ip, err := netip.ParseAddr(u.Hostname())
	if err != nil || AddressAllowed(ip, allowed) {
		return nil
	}
	return invalid("url", "%s is a private, loopback, link-local or reserved address, which the worker refuses to reach; "+
		"allow it with HOOKLANE_ALLOWED_CIDRS (read by the web and worker processes alike)", ip)
}
