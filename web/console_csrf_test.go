package web

import (
	"testing"
	"time"
)

// A form's token is good for its action in its window and the next, and
// for nothing else: not another action, not later, not under another key.
func TestFormTokenWindows(t *testing.T) {
	k := newFormKey("token-0123456789abcdef")
	at := time.Date(2026, 7, 11, 8, 0, 0, 0, time.UTC)
	tok := k.token("", "/console/subscribers/s/pause", at)
	for _, c := range []struct {
		name    string
		action  string
		session string
		key     formKey
		now     time.Time
		want    bool
	}{
		{"at once", "/console/subscribers/s/pause", "", k, at, true},
		{"59 minutes on", "/console/subscribers/s/pause", "", k, at.Add(59 * time.Minute), true},
		{"the next window", "/console/subscribers/s/pause", "", k, at.Add(formWindow + 59*time.Minute), true},
		{"two windows on", "/console/subscribers/s/pause", "", k, at.Add(2 * formWindow), false},
		{"before it was made", "/console/subscribers/s/pause", "", k, at.Add(-time.Second), false},
		{"another action", "/console/subscribers/s/resume", "", k, at, false},
		{"another subscriber", "/console/subscribers/t/pause", "", k, at, false},
		{"another token's key", "/console/subscribers/s/pause", "", newFormKey("token-0123456789abcdeX"), at, false},
		{"no token's key", "/console/subscribers/s/pause", "", newFormKey(""), at, false},
		{"a portal session's", "/console/subscribers/s/pause", "digest-of-a-session", k, at, false},
	} {
		if got := c.key.valid(c.session, c.action, tok, c.now); got != c.want {
			t.Errorf("%s: valid %v, want %v", c.name, got, c.want)
		}
	}
	if newFormKey("").valid("", "/a", newFormKey("").token("", "/a", at), at) {
		t.Error("two tokenless processes share a key; want one of their own each")
	}
	if k.valid("", "/console/subscribers/s/pause", "", at) {
		t.Error("an empty token is valid")
	}
	// A portal session's token is its session's alone: not the operator's
	// console's, not another session's.
	ptok := k.token("session-a", "/console/subscribers/s/pause", at)
	if !k.valid("session-a", "/console/subscribers/s/pause", ptok, at) || k.valid("session-b", "/console/subscribers/s/pause", ptok, at) ||
		k.valid("", "/console/subscribers/s/pause", ptok, at) {
		t.Error("a portal session's form token: want it valid for its session alone")
	}
}
