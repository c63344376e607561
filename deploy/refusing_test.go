package deploy_test

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
)

func TestRefusingPortRefusesAndHoldsThePort(t *testing.T) {
	p, err := deploy.NewRefusingPort()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = net.DialTimeout("tcp", p.Addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", p.Addr, err)
	}
	if l, err := net.Listen("tcp", p.Addr); err == nil {
		l.Close()
		t.Fatalf("another listener took %s while it was held", p.Addr)
	}
}
