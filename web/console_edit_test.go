package web_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// formError is the field and message a re-rendered form shows.
func formError(t *testing.T, body string) (field, msg string) {
	t.Helper()
	m := regexp.MustCompile(`(?s)<p class="error" id="form-error">(?:<code>([^<]*)</code>: )?(.*?)</p>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no error beside the form\n%s", body)
	}
	return html.UnescapeString(m[1]), html.UnescapeString(m[2])
}

// The console creates, edits and deletes a subscriber through the API's
// own path: a field the API refuses is refused with the API's words,
// nothing stored; a new subscriber's generated secret is shown once; an
// edit keeps the secrets and the pause; a delete wants the id typed.
func TestConsoleCreatesEditsAndDeletesASubscriber(t *testing.T) {
	b := setup(t, nil)
	const create = "/console/create/subscriber"
	if p := b.consoleGet(t, "/console/subscribers"); !strings.Contains(p.body, `href="`+create+`"`) {
		t.Fatal("the subscriber list links no form to create one")
	}
	good := url.Values{"id": {"made"}, "url": {"http://127.0.0.1:9/hook"}, "event_types": {"order.*, invoice.paid"},
		"rate": {"5"}, "period": {"1s"}, "burst": {"7"}, "max_attempts": {"3"}, "retry_horizon": {"2h"}, "metrics": {"on"}}
	with := func(k, v string) url.Values {
		f := url.Values{}
		for key, vs := range good {
			f[key] = vs
		}
		f.Set(k, v)
		return f
	}
	// Refused as the API refuses the same subscriber: same field, same words.
	for _, c := range []struct {
		form url.Values
		api  map[string]any
	}{
		{with("url", "ftp://127.0.0.1/x"), map[string]any{"url": "ftp://127.0.0.1/x"}},
		{with("retry_horizon", "10ms"), map[string]any{"url": "http://127.0.0.1:9/hook", "retry_horizon": "10ms"}},
		{with("period", "soon"), map[string]any{"url": "http://127.0.0.1:9/hook", "rate_limit": map[string]any{"rate": 5, "burst": 7, "period": "soon"}}},
		{with("event_types", "a**"), map[string]any{"url": "http://127.0.0.1:9/hook", "event_types": []string{"a**"}}},
	} {
		r := b.callRaw(t, "PUT", "/v1/subscribers/made", c.api, bearer) // not the contract's: the API refuses it
		_, apiField := r.errorOf(t)
		apiMsg := r.json(t)["error"].(map[string]any)["message"].(string)
		p := b.consolePost(t, create, create, c.form)
		field, msg := formError(t, p.body)
		if p.status != r.status || field != apiField || msg != apiMsg {
			t.Errorf("create with %v: %d %s %q; the API: %d %s %q", c.api, p.status, field, msg, r.status, apiField, apiMsg)
		}
		if !strings.Contains(p.body, `value="http://127.0.0.1:9/hook"`) && !strings.Contains(p.body, `value="ftp://127.0.0.1/x"`) {
			t.Errorf("the re-rendered form lost what was typed")
		}
	}
	for field, form := range map[string]url.Values{"rate_limit.rate": with("rate", "five"), "id": with("id", "a b"), "max_in_flight": with("max_in_flight", "-1")} {
		p := b.consolePost(t, create, create, form)
		if got, _ := formError(t, p.body); p.status != http.StatusUnprocessableEntity || got != field {
			t.Errorf("create with a bad %s: %d, field %q", field, p.status, got)
		}
	}
	if _, err := b.p.GetSubscriber(t.Context(), "made"); err == nil {
		t.Fatal("a refused form stored the subscriber")
	}

	// Created, its generated secret shown once.
	p := b.consolePost(t, create, create, good)
	sub, err := b.p.GetSubscriber(t.Context(), "made")
	if p.status != http.StatusOK || err != nil {
		t.Fatalf("create: %d, %v\n%s", p.status, err, p.body)
	}
	if want := (tasks.Subscriber{URL: "http://127.0.0.1:9/hook", EventTypes: []string{"order.*", "invoice.paid"}, MaxAttempts: 3,
		RetryHorizon: tasks.Duration(2 * time.Hour), Metrics: true}); sub.URL != want.URL || !slices.Equal(sub.EventTypes, want.EventTypes) ||
		sub.MaxAttempts != 3 || sub.RetryHorizon != want.RetryHorizon || !sub.Metrics || sub.Limit.Rate != 5 || sub.Limit.Burst != 7 || sub.Limit.Period != time.Second {
		t.Fatalf("stored %+v", sub)
	}
	if len(sub.Secrets) != 1 || strings.Count(html.UnescapeString(p.body), sub.Secrets[0]) != 1 {
		t.Fatalf("the created page does not show the generated secret once")
	}
	if again := b.consolePost(t, create, create, with("url", "http://127.0.0.1:9/other")); again.status != http.StatusConflict {
		t.Errorf("create an existing id: %d, want 409", again.status)
	} else if field, _ := formError(t, again.body); field != "id" {
		t.Errorf("create an existing id: field %q", field)
	}

	// Edited: the form shows the subscriber; secrets and pause stay.
	const edit = "/console/subscribers/made/edit"
	b.call(t, "POST", "/v1/subscribers/made/pause", nil)
	form := b.consoleGet(t, edit).body
	for _, v := range []string{`value="http://127.0.0.1:9/hook"`, `value="order.*, invoice.paid"`, `value="PT2H"`, `name="metrics" checked`} {
		if !strings.Contains(form, v) {
			t.Errorf("the edit form does not show %s", v)
		}
	}
	if p := b.consolePost(t, edit, edit, url.Values{"url": {"http://127.0.0.1:9/x"}, "max_attempts": {"0x"}}); p.status != http.StatusUnprocessableEntity {
		t.Errorf("edit with a bad max_attempts: %d", p.status)
	}
	p = b.consolePost(t, edit, edit, url.Values{"url": {"http://127.0.0.1:9/new"}, "event_types": {""}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/subscribers/made?done=saved" {
		t.Fatalf("edit: %d %q", p.status, p.header.Get("Location"))
	}
	after, err := b.p.GetSubscriber(t.Context(), "made")
	if err != nil || after.URL != "http://127.0.0.1:9/new" || len(after.EventTypes) != 0 || after.MaxAttempts != 0 || !after.Paused ||
		!slices.Equal(after.Secrets, sub.Secrets) {
		t.Fatalf("after the edit: %+v, %v; want the new URL, every type, the default attempts, still paused, the same secret", after, err)
	}

	// Deleted once its id is typed.
	const del = "/console/subscribers/made/delete"
	if p := b.consolePost(t, edit, del, url.Values{"confirm": {"mad"}}); p.status != http.StatusUnprocessableEntity {
		t.Errorf("delete with the wrong id typed: %d", p.status)
	}
	if _, err := b.p.GetSubscriber(t.Context(), "made"); err != nil {
		t.Fatalf("deleted without its id typed: %v", err)
	}
	p = b.consolePost(t, edit, del, url.Values{"confirm": {"made"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/subscribers?done=deleted" {
		t.Fatalf("delete: %d %q", p.status, p.header.Get("Location"))
	}
	if _, err := b.p.GetSubscriber(t.Context(), "made"); err == nil {
		t.Fatal("still there after the delete")
	}
	if !strings.Contains(b.consoleGet(t, "/console/subscribers?done=deleted").body, "Deleted:") {
		t.Error("the list does not say what the delete did")
	}
	// Like every action, not without the form's token.
	if p := b.console(t, "POST", create, good, nil, true); p.status != http.StatusForbidden {
		t.Errorf("create without the token: %d, want 403", p.status)
	}
}
