package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/web/cli"
)

// cli runs an operator command against b's server and decodes its output.
// Its requests and their answers are validated against the contract.
func (b *bundle) cli(t *testing.T, out any, args ...string) error {
	t.Helper()
	return b.runCLI(t, out, map[string]string{"HOOKLANE_URL": b.srv.URL, "HOOKLANE_API_TOKEN": token}, false, args...)
}

// cliRaw is cli for a command whose request is deliberately off the
// contract (see callRaw): only the answer is validated.
func (b *bundle) cliRaw(t *testing.T, env map[string]string, args ...string) error {
	t.Helper()
	return b.runCLI(t, nil, env, true, args...)
}

func (b *bundle) runCLI(t *testing.T, out any, env map[string]string, raw bool, args ...string) error {
	t.Helper()
	var buf bytes.Buffer
	c := cli.FromEnv(func(k string) string { return env[k] })
	c.HTTP.Transport = checked{t: t, next: b.srv.Client().Transport, raw: raw}
	err := cli.RunWith(context.Background(), c, args, &buf)
	if err == nil && out != nil {
		if jerr := json.Unmarshal(buf.Bytes(), out); jerr != nil {
			t.Fatalf("%v: output %q: %v", args, buf.String(), jerr)
		}
	}
	return err
}

func TestCLI(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n < 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	var sub web.Subscriber
	if err := b.cli(t, &sub, "subscribers", "put", "s", "-url", s.URL, "-events", "video.*,billing.paid",
		"-rate", "5", "-period", "1s", "-max-attempts", "1", "-metrics"); err != nil {
		t.Fatal(err)
	}
	if len(sub.Secrets) != 1 || sub.RateLimit.Burst != 5 || len(sub.EventTypes) != 2 || sub.MaxAttempts != 1 || !sub.Metrics {
		t.Fatalf("put: %+v", sub)
	}
	var list []web.Subscriber
	if err := b.cli(t, &list, "subscribers", "list"); err != nil || len(list) != 1 || list[0].Secrets != nil {
		t.Fatalf("list: %+v, %v", list, err)
	}
	var res struct{ Targets []struct{ Outcome string } }
	if err := b.cli(t, &res, "publish", "-id", "e1", "-type", "video.x", "-data", `{"a":1}`); err != nil ||
		len(res.Targets) != 1 || res.Targets[0].Outcome != "enqueued" {
		t.Fatalf("publish: %+v, %v", res, err)
	}
	if err := b.cli(t, &res, "publish", "-id", "e1", "-type", "video.x", "-data", `{"a":1}`); err != nil || res.Targets[0].Outcome != "duplicate" {
		t.Fatalf("publish again: %+v, %v", res, err)
	}
	var dead web.DeadLetterPage
	testkit.Eventually(t, 10*time.Second, "a dead letter", func() bool {
		return b.cli(t, &dead, "dead-letters", "list", "-subscriber", "s") == nil && len(dead.DeadLetters) == 1
	})
	var outcomes []struct{ TaskID, Outcome string }
	if err := b.cli(t, &outcomes, "dead-letters", "replay", "-id", dead.DeadLetters[0].TaskID); err != nil ||
		len(outcomes) != 1 || outcomes[0].Outcome != "enqueued" {
		t.Fatalf("replay: %+v, %v", outcomes, err)
	}
	testkit.Eventually(t, 10*time.Second, "redelivery", func() bool { return len(s.Got()) == 2 })
	var st web.Status
	testkit.Eventually(t, 10*time.Second, "the delivery counted", func() bool {
		return b.cli(t, &st, "subscribers", "status", "s") == nil && st.Counts.Delivered == 1
	})
	if err := b.cli(t, &sub, "subscribers", "rotate", "s", "-grace", "1h"); err != nil || len(sub.Secrets) != 1 || len(sub.RetiringUntil) != 1 {
		t.Fatalf("rotate: %+v, %v", sub, err)
	}
	if err := b.cli(t, &sub, "subscribers", "pause", "s"); err != nil || !sub.Paused {
		t.Fatalf("pause: %+v, %v", sub, err)
	}

	var ae *web.APIError
	if err := b.cli(t, nil, "subscribers", "get", "nobody"); !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "unknown_subscriber" {
		t.Fatalf("get unknown: %v", err)
	}
	env := map[string]string{"HOOKLANE_URL": b.srv.URL, "HOOKLANE_API_TOKEN": token}
	if err := b.cliRaw(t, env, "subscribers", "put", "x", "-url", "ftp://x"); !errors.As(err, &ae) || ae.Field != "url" {
		t.Fatalf("put invalid: %v", err)
	}
	for _, args := range [][]string{{"subscribers"}, {"subscribers", "frob", "s"}, {"publish", "-nope"}, {"dead-letters"}, {"nothing"}} {
		if err := b.cli(t, nil, args...); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: %v, want ErrUsage", args, err)
		}
	}
	err := b.cliRaw(t, map[string]string{"HOOKLANE_URL": b.srv.URL}, "subscribers", "list")
	if !errors.As(err, &ae) || ae.Status != 401 || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("without a token: %v", err)
	}
}

// The delivery log from the CLI: list, get, the event, a resend.
func TestCLIDeliveryLog(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, nil)
	if err := b.cli(t, nil, "subscribers", "put", "s", "-url", s.URL); err != nil {
		t.Fatal(err)
	}
	if err := b.cli(t, nil, "publish", "-type", "t", "-id", "evt_1", "-data", `{"n":1}`); err != nil {
		t.Fatal(err)
	}
	var d tasks.DeliveryRecord
	testkit.Eventually(t, 10*time.Second, "delivered", func() bool {
		return b.cli(t, &d, "deliveries", "get", "s", "evt_1") == nil && d.State == tasks.StateDelivered
	})
	if len(d.Attempts) != 1 || d.Attempts[0].Status != 200 {
		t.Fatalf("deliveries get: %+v", d)
	}
	var page web.DeliveryPage
	if err := b.cli(t, &page, "deliveries", "list", "s", "-state", "delivered", "-limit", "10"); err != nil ||
		len(page.Deliveries) != 1 || page.Deliveries[0].EventID != "evt_1" {
		t.Fatalf("deliveries list: %+v, %v", page, err)
	}
	var ev producer.EventRecord
	if err := b.cli(t, &ev, "events", "get", "evt_1"); err != nil || ev.Event.ID != "evt_1" || len(ev.Deliveries) != 1 {
		t.Fatalf("events get: %+v, %v", ev, err)
	}
	if err := b.cli(t, nil, "deliveries", "resend", "s", "evt_1"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "resent", func() bool { return s.Count() == 2 })
	if err := b.cliRaw(t, map[string]string{"HOOKLANE_URL": b.srv.URL}, "deliveries", "get", "s"); !errors.Is(err, cli.ErrUsage) {
		t.Fatalf("deliveries get without an event id: %v; want a usage error", err)
	}
}

// A flag the CLI cannot send is refused in plain words naming the flag,
// before any request; a limit flag given is sent as given, so that the
// API refuses what it refuses (-rate 0, -max-in-flight 0) instead of the
// CLI quietly sending its default. Nothing refused is written.
func TestCLIRefusesBadFlags(t *testing.T) {
	b := setup(t, nil)
	bad := t.TempDir() + "/bad.json"
	if err := os.WriteFile(bad, []byte(`{"a":`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"publish", "-type", "t", "-data", "{bad"}, "-data is not valid JSON: invalid character 'b' looking for beginning of object key string at byte 2"},
		{[]string{"publish", "-type", "t", "-data", `{"a":1}x`}, "-data is not valid JSON: invalid character 'x' after top-level value at byte 8"},
		{[]string{"publish", "-type", "t", "-data", ""}, "-data is not valid JSON: it is empty"},
		{[]string{"publish", "-type", "t", "-data", "@" + bad}, "-data @" + bad + " is not valid JSON: the file ends inside a value"},
	} {
		err := b.cliRaw(t, map[string]string{"HOOKLANE_URL": b.srv.URL, "HOOKLANE_API_TOKEN": token}, c.args...)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "json: ") {
			t.Errorf("%q: %v; want a usage error saying %q", c.args, err, c.want)
		}
	}
	env := map[string]string{"HOOKLANE_URL": b.srv.URL, "HOOKLANE_API_TOKEN": token}
	for _, c := range []struct {
		args  []string
		field string
	}{
		{[]string{"-rate", "0"}, "rate_limit.rate"},
		{[]string{"-period", "1m"}, "rate_limit.rate"},
		{[]string{"-rate", "5", "-period", "1y"}, "rate_limit.period"},
		{[]string{"-max-in-flight", "0"}, "max_in_flight"},
	} {
		var ae *web.APIError
		args := append([]string{"subscribers", "put", "s", "-url", "https://a.test/h"}, c.args...)
		if err := b.cliRaw(t, env, args...); !errors.As(err, &ae) || ae.Status != 422 || ae.Field != c.field {
			t.Errorf("%q: %v; want the API's 422 naming %s", c.args, err, c.field)
		}
	}
	if subs, err := b.p.ListSubscribers(t.Context()); err != nil || len(subs) != 0 {
		t.Errorf("%d subscribers after refused puts (%v), want 0", len(subs), err)
	}
	if n := testkit.Totals(t, b.insp, b.ns).Size; n != 0 {
		t.Errorf("%d tasks after refused publishes", n)
	}
}
