package worker

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hooklane/hooklane/tasks"
)

// A request keeps the headers it was sent with, its signatures cut to a
// few characters, and a bounded subset of the answer's headers, a cookie by
// its name only.
func TestPostKeepsHeadersBounded(t *testing.T) {
	const (
		secret1 = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		secret2 = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	)
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Add("Set-Cookie", "session=receivers-own-credential")
		w.Header().Set("X-Long", strings.Repeat("v", 3000))
		for i := range 30 {
			w.Header().Set(fmt.Sprintf("X-H%02d", i), "value")
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	sub := &tasks.Subscriber{ID: "s", URL: srv.URL, Secrets: []string{secret1, secret2}}
	r := post(t.Context(), srv.Client(), sub, "evt_1", []byte(`{"id":"evt_1"}`), 16, nil)
	if r.err != nil || r.status != http.StatusAccepted {
		t.Fatalf("post: %d %v", r.status, r.err)
	}

	sent := map[string]string{}
	for _, h := range r.sent {
		sent[h.Name] = h.Value
	}
	full := got.Get(standardwebhooks.HeaderWebhookSignature)
	sigs := strings.Fields(full)
	if len(sigs) != 2 {
		t.Fatalf("the receiver got signature %q; want two", full)
	}
	want := sigs[0][:3+signatureShown] + "… " + sigs[1][:3+signatureShown] + "…"
	if s := sent["Webhook-Signature"]; s != want || strings.Contains(s, sigs[0][3+signatureShown:]) {
		t.Errorf("kept signature %q, want %q (the receiver got %q)", s, want, full)
	}
	for _, name := range []string{"Content-Type", "User-Agent", "Webhook-Id", "Webhook-Timestamp"} {
		if sent[name] == "" || sent[name] != got.Get(name) {
			t.Errorf("kept %s %q; the receiver got %q", name, sent[name], got.Get(name))
		}
	}
	if len(r.sent) != 5 {
		t.Errorf("kept %d request headers, want the 5 hooklane sets: %v", len(r.sent), r.sent)
	}

	bytes, names := 0, map[string]string{}
	for _, h := range r.headers {
		bytes += len(h.Name) + len(h.Value)
		names[h.Name] = h.Value
	}
	// Content-Length, Date, Set-Cookie, 30 X-H.., X-Long: 34.
	if len(r.headers) != tasks.MaxResponseHeaders || r.cut != 34-tasks.MaxResponseHeaders || bytes > tasks.MaxResponseHeaderBytes {
		t.Errorf("kept %d response headers of %d bytes, %d cut; want %d, at most %d bytes, %d cut",
			len(r.headers), bytes, r.cut, tasks.MaxResponseHeaders, tasks.MaxResponseHeaderBytes, 34-tasks.MaxResponseHeaders)
	}
	if names["Set-Cookie"] != "(not kept)" {
		t.Errorf("Set-Cookie kept as %q", names["Set-Cookie"])
	}
	if names["Date"] == "" || names["X-H00"] != "value" {
		t.Errorf("kept %v; want Date and X-H00 among the first in name order", names)
	}

	// A value longer than the bytes left is cut, and the bound still holds.
	long, _ := keepHeaders(http.Header{"X-Long": {strings.Repeat("v", 3000)}})
	if len(long) != 1 || !strings.HasSuffix(long[0].Value, "…") || len(long[0].Name)+len(long[0].Value) > tasks.MaxResponseHeaderBytes {
		t.Errorf("a 3000-byte header kept as %d bytes", len(long[0].Value))
	}

	// The stored attempt carries them; its size is what they cost in Redis.
	a := tasks.Attempt{At: time.Now(), Status: r.status, LatencyMS: 3, RequestHeaders: r.sent}
	bare := len(tasks.EncodeAttempt(tasks.Attempt{At: a.At, Status: r.status, LatencyMS: 3}))
	withSent := len(tasks.EncodeAttempt(a))
	a.ResponseHeaders, _ = keepHeaders(http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "Content-Length": {"2"},
		"Date": {time.Now().UTC().Format(http.TimeFormat)}})
	t.Logf("an attempt's stored value: %d bytes bare, %d with the request's headers (2 secrets), %d with a Go server's 3 answer headers",
		bare, withSent, len(tasks.EncodeAttempt(a)))
}
