package testkit

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// DNS is a DNS server on 127.0.0.1 that answers A queries for its names
// and nothing else, so a test can give a host name the address it wants
// without a packet leaving the machine.
type DNS struct {
	conn  net.PacketConn
	names map[string]netip.Addr // lower case, no trailing dot
}

// NewDNS starts a DNS server answering names (host → IPv4 address). It
// stops when the test ends.
func NewDNS(t testing.TB, names map[string]string) *DNS {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &DNS{conn: conn, names: map[string]netip.Addr{}}
	for n, a := range names {
		d.names[strings.ToLower(n)] = netip.MustParseAddr(a)
	}
	go d.serve()
	t.Cleanup(func() { conn.Close() })
	return d
}

// Resolver is a resolver that asks this server only.
func (d *DNS) Resolver() *net.Resolver {
	addr := d.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", addr)
	}}
}

func (d *DNS) serve() {
	buf := make([]byte, 512)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := d.answer(buf[:n]); resp != nil {
			_, _ = d.conn.WriteTo(resp, from)
		}
	}
}

// answer builds the reply to one query: the question echoed, and an A
// record when the name is known and A was asked for.
func (d *DNS) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	// The question: labels up to the zero byte, then type and class.
	i := 12
	var labels []string
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	question := q[12 : i+5]
	qtype := binary.BigEndian.Uint16(q[i+1 : i+3])
	addr, known := d.names[strings.ToLower(strings.Join(labels, "."))]
	resp := make([]byte, 12, 64)
	copy(resp, q[:2]) // id
	rcode := uint16(0)
	if !known {
		rcode = 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(resp[2:], 0x8180|rcode) // response, recursion desired and available
	binary.BigEndian.PutUint16(resp[4:], 1)            // one question
	resp = append(resp, question...)
	if known && qtype == 1 && addr.Is4() {
		binary.BigEndian.PutUint16(resp[6:], 1) // one answer
		ip := addr.As4()
		resp = append(resp, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4) // name pointer, A, IN, ttl 60, 4 bytes
		resp = append(resp, ip[:]...)
	}
	return resp
}
