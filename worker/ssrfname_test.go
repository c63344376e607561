package worker_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// The SSRF guard judges the address a host name resolves to, not the name:
// a customer's hooks.customer.test that resolves to loopback is refused
// like 127.0.0.1 itself, and reached once loopback is allowed. A DNS server
// on 127.0.0.1 answers the name; no packet leaves the machine.
func TestSSRFGuardRefusesANameResolvingToARefusedAddress(t *testing.T) {
	t.Parallel()
	dns := testkit.NewDNS(t, map[string]string{"hooks.customer.test": "127.0.0.1"})
	s := testkit.NewSink(t, nil)
	port := s.URL[strings.LastIndex(s.URL, ":")+1:]
	url := "http://hooks.customer.test:" + port + "/hooks"
	for _, c := range []struct {
		name    string
		allowed []netip.Prefix
		refused bool
	}{
		{"loopback not allowed", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, true},
		{"loopback allowed", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t, worker.Config{AllowedCIDRs: c.allowed, Resolver: dns.Resolver()})
			before := s.Count()
			b.put(t, tasks.Subscriber{ID: "s", URL: url})
			b.publish(t, "e", "t")
			if !c.refused {
				testkit.Eventually(t, 10*time.Second, "the delivery through the name", func() bool { return s.Count() == before+1 })
				return
			}
			testkit.Eventually(t, 10*time.Second, "archived", func() bool {
				info, err := testkit.Task(b.insp, b.ns, tasks.TaskID("s", "e"))
				return err == nil && info.State == asynq.TaskStateArchived
			})
			dl := b.dead(t, producer.DeadLetterQuery{})
			if len(dl) != 1 || dl[0].Reason != worker.DeadRefused || !strings.Contains(dl[0].Error, "127.0.0.1 is a private, loopback") {
				t.Fatalf("ledger %+v; want one entry refused for the resolved 127.0.0.1", dl)
			}
			if s.Count() != before {
				t.Fatal("the refused endpoint received a request")
			}
		})
	}
}
