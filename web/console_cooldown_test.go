package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// The subscriber page offers to end a cooldown while there is one; the
// button does what the API's cooldown/end does: the parked delivery goes
// at once, its attempt noting that an operator let it go early.
func TestConsoleEndsACooldown(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL})
	const page, action = "/console/subscribers/s", "/console/subscribers/s/cooldown/end"
	if p := b.consoleGet(t, page); strings.Contains(p.body, `id="end-cooldown"`) {
		t.Fatal("a cooldown to end before there is one")
	}
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1}`)
	b.waitState(t, "s", "e1", tasks.StateCooling)
	if p := b.consoleGet(t, page); !strings.Contains(p.body, `id="end-cooldown"`) {
		t.Fatalf("no button to end the hour's cooldown\n%s", p.body)
	}
	p := b.consolePost(t, page, action, nil)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != page+"?done=cooldown-ended" {
		t.Fatalf("end the cooldown: %d %q; want 303 to the subscriber", p.status, p.header.Get("Location"))
	}
	b.waitState(t, "s", "e1", tasks.StateDelivered)
	if s.Count() != 2 {
		t.Fatalf("%d requests; want the 429 and the one sent when the cooldown ended", s.Count())
	}
	after := b.consoleGet(t, page+"?done=cooldown-ended").body
	if strings.Contains(after, `id="end-cooldown"`) || !strings.Contains(after, "Cooldown ended") {
		t.Errorf("after the end: the button still shows, or no word of what it did")
	}
	if d := b.consoleGet(t, "/console/subscribers/s/deliveries/e1").body; !strings.Contains(d, "sent early: cooldown ended by an operator") {
		t.Errorf("the attempt after the end carries no note\n%s", d)
	}
	// Like every action: not without the form's token.
	if p := b.console(t, "POST", action, nil, nil, true); p.status != http.StatusForbidden {
		t.Errorf("without the form's token: %d, want 403", p.status)
	}
}
