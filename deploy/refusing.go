package deploy

import (
	"net"
	"strconv"
	"syscall"
)

// RefusingPort holds a 127.0.0.1 port on which connections are refused,
// like a service that is down: a socket bound to the port that never
// listens. Unlike listening and closing at once, it keeps every other
// listener off the port until Close, so a test's "down" endpoint cannot
// turn into another test's server.
type RefusingPort struct {
	fd   int
	Addr string // 127.0.0.1:port
}

// NewRefusingPort binds a free 127.0.0.1 port without listening on it.
func NewRefusingPort() (*RefusingPort, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	port := sa.(*syscall.SockaddrInet4).Port
	return &RefusingPort{fd: fd, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, nil
}

// Close frees the port.
func (p *RefusingPort) Close() error { return syscall.Close(p.fd) }
