package worker

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/hooklane/hooklane/tasks"
)

// ErrForbiddenAddress is the dial error for an endpoint address the SSRF
// guard refuses. Deliveries that hit it are dead-lettered, not retried.
var ErrForbiddenAddress = errors.New("address not allowed")

// dialControl runs after DNS resolution, on the address about to be
// dialed, so a hostname that resolves (or re-resolves: DNS rebinding) to a
// refused address is caught where it matters.
func dialControl(allowed []netip.Prefix) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot parse %q", ErrForbiddenAddress, address)
		}
		if !tasks.AddressAllowed(ap.Addr(), allowed) {
			return fmt.Errorf("%w: %s is a private, loopback, link-local or reserved address (allow it with HOOKLANE_ALLOWED_CIDRS)",
				ErrForbiddenAddress, ap.Addr())
		}
		return nil
	}
}
