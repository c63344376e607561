package tasks_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/tasks"
)

// These cases never dial: they check the decision the dialer's Control
// hook makes on the resolved address.
func TestAddressAllowed(t *testing.T) {
	refused := []string{
		"127.0.0.1", "127.255.255.254", "::1", "0.0.0.0", "::",
		"10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "169.254.0.1", "fe80::1", "fe80::1%eth0",
		"100.64.0.1", "100.127.255.255",
		"fc00::1", "fd12:3456::1",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",
		"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1",
		"224.0.0.1", "239.255.255.250", "ff02::1", "ff05::2",
		"255.255.255.255", "240.0.0.1",
		"2002:7f00:1::1", "2001:0:4136:e378::1", "::127.0.0.1",
		"198.18.0.1", "192.0.0.8", "2001:db8::1",
	}
	for _, s := range refused {
		if tasks.AddressAllowed(netip.MustParseAddr(s), nil) {
			t.Errorf("%s allowed, want refused", s)
		}
	}
	allowed := []string{"93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:93.184.216.34", "64:ff9b::5db8:d822", "100.128.0.1", "172.32.0.1"}
	for _, s := range allowed {
		if !tasks.AddressAllowed(netip.MustParseAddr(s), nil) {
			t.Errorf("%s refused, want allowed", s)
		}
	}
	list := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16")}
	for _, tt := range []struct {
		ip   string
		want bool
	}{{"127.0.0.1", true}, {"::ffff:127.0.0.1", true}, {"10.1.2.3", true}, {"10.2.0.1", false}, {"169.254.169.254", false}} {
		if got := tasks.AddressAllowed(netip.MustParseAddr(tt.ip), list); got != tt.want {
			t.Errorf("with allowlist: %s allowed=%v, want %v", tt.ip, got, tt.want)
		}
	}
}

func TestParseCIDRs(t *testing.T) {
	got, err := tasks.ParseCIDRs(" 127.0.0.0/8, 10.1.2.3/16,,::1/128")
	if err != nil || len(got) != 3 || got[1].String() != "10.1.0.0/16" {
		t.Fatalf("ParseCIDRs = %v, %v", got, err)
	}
	if _, err := tasks.ParseCIDRs("10.0.0.0"); err == nil {
		t.Fatal("a bare address was accepted")
	}
}

// A subscriber URL naming a refused address literally is refused when it
// is written; a host name, or an allowlisted address, is not (the worker
// checks what a name resolves to when it dials). No address is dialed.
func TestValidateURLAddress(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tt := range []struct {
		url     string
		allowed []netip.Prefix
		refused bool
	}{
		{"http://10.0.0.1/hook", nil, true},
		{"http://169.254.169.254/latest/meta-data", nil, true},
		{"http://0.0.0.0:8080/", nil, true},
		{"http://[::1]:9/x", nil, true},
		{"http://[::ffff:127.0.0.1]/", nil, true},
		{"http://127.0.0.1:8080/hook", nil, true},
		{"http://127.0.0.1:8080/hook", loopback, false},
		{"http://[::1]:9/x", loopback, false},
		{"http://10.0.0.1/hook", loopback, true},
		{"https://93.184.216.34/hook", nil, false},
		{"https://hooks.example.com/x", nil, false}, // a name: checked at delivery, after DNS
		// localhost names are loopback by definition (RFC 6761): refused
		// like 127.0.0.1, unless loopback is allowed.
		{"https://localhost/hook", nil, true},
		{"http://LocalHost.:8080/", nil, true},
		{"http://api.localhost/", nil, true},
		{"http://localhost:8080/hook", loopback, false},
		{"https://localhost.example.com/", nil, false},
		// Every way a resolver reads an IPv4 address (inet_aton): one
		// 32-bit number, hex, octal, 2 or 3 parts.
		{"http://0x7f000001/", nil, true},
		{"http://2130706433/", nil, true},
		{"http://0177.0.0.1/", nil, true},
		{"http://127.1/", nil, true},
		{"http://127.0.1/", nil, true},
		{"http://0x7f.0x0.0x0.0x1/", nil, true},
		{"http://017700000001/", nil, true},
		{"http://127.0.0.1./", nil, true},
		{"http://0xa9fea9fe/latest", nil, true}, // 169.254.169.254
		{"http://0/", nil, true},                // 0.0.0.0
		{"http://0x7f000001/", loopback, false},
		{"http://127.1/", loopback, false},
		{"http://1572395042/", nil, false},          // 93.184.216.34
		{"http://0x5d.0xb8.0xd8.0x22/", nil, false}, // 93.184.216.34
		{"http://4294967296/", nil, true},           // numeric, but no address: never a host name either
		{"http://256.0.0.1/", nil, true},
		{"http://1.2.3.4.5/", nil, true},
		{"http://08.0.0.1/", nil, true}, // not octal, not decimal
		{"http://0x.example/", nil, false},
		{"http://123.example/", nil, false},
		{"http://7f000001.example/", nil, false},
	} {
		err := tasks.ValidateURLAddress(tt.url, tt.allowed)
		if (err != nil) != tt.refused {
			t.Errorf("%s with %v: err %v, want refused=%v", tt.url, tt.allowed, err, tt.refused)
			continue
		}
		var fe *tasks.FieldError
		says := func(w string) bool { return err != nil && strings.Contains(err.Error(), w) }
		if err != nil && (!errors.As(err, &fe) || fe.Field != "url" || !says("HOOKLANE_ALLOWED_CIDRS") && !says("not an IPv4 address")) {
			t.Errorf("%s: %v; want an error naming url and HOOKLANE_ALLOWED_CIDRS, or saying it is not an address", tt.url, err)
		}
	}
}
