package worker

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// ErrForbiddenAddress is the dial error for an endpoint address the SSRF
// guard refuses. Deliveries that hit it are dead-lettered, not retried.
var ErrForbiddenAddress = errors.New("address not allowed")

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

// AddressAllowed reports whether the worker may connect to ip. IPv4-mapped
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

// dialControl runs after DNS resolution, on the address about to be
// dialed, so a hostname that resolves (or re-resolves: DNS rebinding) to a
// refused address is caught where it matters.
func dialControl(allowed []netip.Prefix) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot parse %q", ErrForbiddenAddress, address)
		}
		if !AddressAllowed(ap.Addr(), allowed) {
			return fmt.Errorf("%w: %s is a private, loopback, link-local or reserved address (allow it with HOOKLANE_ALLOWED_CIDRS)",
				ErrForbiddenAddress, ap.Addr())
		}
		return nil
	}
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
