package tasks

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
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

// ValidateURLAddress refuses a subscriber URL whose host is an address the
// worker would refuse to reach (AddressAllowed with allowed,
// HOOKLANE_ALLOWED_CIDRS), so that it is refused when it is written, not
// once per event at delivery. The host is read as a resolver reads it: a
// literal address in any of the forms inet_aton takes (0x7f000001,
// 2130706433, 0177.0.0.1, 127.1), and a localhost name as loopback. Any
// other host name is checked where it matters: on every address it
// resolves to, when the worker dials. Nothing is resolved or dialed here.
func ValidateURLAddress(raw string, allowed []netip.Prefix) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil // ValidateURL names what is wrong
	}
	host := u.Hostname()
	ips, err := hostAddresses(host)
	if err != nil {
		return err
	}
	for _, ip := range ips {
		if !AddressAllowed(ip, allowed) {
			name := ip.String()
			if name != host {
				name = fmt.Sprintf("%s (%s)", host, ip)
			}
			return invalid("url", "%s is a private, loopback, link-local or reserved address, which the worker refuses to reach; "+
				"allow it with HOOKLANE_ALLOWED_CIDRS (read by the web and worker processes alike)", name)
		}
	}
	return nil
}

// hostAddresses returns the addresses host stands for without asking a
// resolver: a literal address, or loopback for a localhost name; none for
// any other name.
func hostAddresses(host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	// A name given with its trailing dot is the same name.
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	// RFC 6761 6.3: a resolver answers localhost, and any name under it,
	// with loopback (nss-myhostname and systemd-resolved do), so such a
	// URL is a loopback URL whatever the web process'"'"'s own resolver says.
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}, nil
	}
	if !numeric(name) {
		return nil, nil
	}
	ip, ok := parseInetAton(name)
	if !ok {
		// Not a name either: no top-level domain is all digits.
		return nil, invalid("url", "host %q is made of numbers but is not an IPv4 address: want a host name or an address such as 203.0.113.7", host)
	}
	return []netip.Addr{ip}, nil
}

// numeric reports whether every label of name is a number as inet_aton
// reads one: decimal, 0-led octal or 0x hex.
func numeric(name string) bool {
	if name == "" {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		digits := label
		if len(label) >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X') {
			digits = label[2:]
			if strings.Trim(digits, "0123456789abcdefABCDEF") != "" {
				return false
			}
			continue
		}
		if digits == "" || strings.Trim(digits, "0123456789") != "" {
			return false
		}
	}
	return true
}

// parseInetAton reads an IPv4 address as inet_aton(3) does, which is how
// getaddrinfo, curl and browsers read a host made of numbers: 1 to 4
// parts, each decimal, octal (leading 0) or hex (0x); the last part fills
// the bytes the others leave (127.1 is 127.0.0.1, 2130706433 is too).
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var n [4]uint64
	for i, p := range parts {
		base := 10
		switch {
		case len(p) >= 2 && (p[1] == 'x' || p[1] == 'X'):
			base, p = 16, p[2:]
			if p == "" {
				p = "0" // inet_aton reads "0x" as 0
			}
		case len(p) > 1 && p[0] == '0':
			base = 8
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		n[i] = v
	}
	last := len(parts) - 1
	if n[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i := range last {
		if n[i] > 255 {
			return netip.Addr{}, false
		}
		b[i] = byte(n[i])
	}
	for i := 3; i >= last; i-- {
		b[i] = byte(n[last] >> (8 * (3 - i)))
	}
	return netip.AddrFrom4(b), true
}
