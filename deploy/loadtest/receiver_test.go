package loadtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hooklane/hooklane/tasks"
)

func newRecv(t *testing.T, eps ...Endpoint) (*Receiver, []string) {
	t.Helper()
	r := NewReceiver(nil)
	t.Cleanup(r.Close)
	var urls []string
	for _, e := range eps {
		u, err := r.Add(e)
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, u)
	}
	return r, urls
}

var plain = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}

// send POSTs to url with webhook-id id and returns the status and Retry-After.
func send(t *testing.T, url, id string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
	req.Header.Set("webhook-id", id)
	resp, err := plain.Do(req)
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

func mustSend(t *testing.T, url, id string) (int, string) {
	t.Helper()
	code, ra, err := send(t, url, id)
	if err != nil {
		t.Fatal(err)
	}
	return code, ra
}

func TestRateEnforcingBansWhoComesBackEarly(t *testing.T) {
	t.Parallel()
	r, u := newRecv(t, Endpoint{ID: "p", Kind: RateEnforcing, Rate: 1, Burst: 2, RetryAfter: 2 * time.Second,
		BanFor: time.Minute, Grace: 10 * time.Millisecond})
	for i, want := range []int{200, 200, 429} {
		if code, _ := mustSend(t, u[0], "e"); code != want {
			t.Fatalf("request %d: %d, want %d", i, code, want)
		}
	}
	time.Sleep(30 * time.Millisecond) // past the grace, well before the deadline
	if code, _ := mustSend(t, u[0], "e"); code != http.StatusForbidden {
		t.Fatalf("early request: %d, want 403", code)
	}
	if code, _ := mustSend(t, u[0], "e"); code != http.StatusForbidden {
		t.Fatalf("request while banned: %d, want 403", code)
	}
	st := r.Stats("p")
	if st.Throttled != 1 || st.Early != 1 || st.Bans != 1 || st.Banned != 1 || st.Overlap != 0 ||
		st.RetryAfterSent != 1 || st.Armed != 1 || st.BanFor != time.Minute {
		t.Fatalf("stats %+v", st)
	}
	if d := r.Deadlines("p"); len(d) != 1 || d[0].Sub(r.Arrivals("p")[2].At) != 2*time.Second {
		t.Fatalf("deadlines %v, want the third arrival + 2s", d)
	}
	if n := len(r.Arrivals("p")); n != 5 {
		t.Fatalf("%d arrivals, want 5", n)
	}
}

func TestRateEnforcingForgivesInFlightOverlap(t *testing.T) {
	t.Parallel()
	r, u := newRecv(t, Endpoint{ID: "p", Kind: RateEnforcing, Rate: 1, Burst: 1, Grace: time.Second})
	mustSend(t, u[0], "a")
	if code, ra := mustSend(t, u[0], "b"); code != 429 || ra != "1" {
		t.Fatalf("%d Retry-After %q, want 429 and 1", code, ra)
	}
	if code, _ := mustSend(t, u[0], "c"); code != 429 {
		t.Fatalf("request within grace: %d, want 429", code)
	}
	// Both 429s carried Retry-After; only the first set a deadline.
	if st := r.Stats("p"); st.Overlap != 1 || st.Bans != 0 || st.RetryAfterSent != 2 || st.Armed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRateEnforcingHTTPDateIsHonest(t *testing.T) {
	t.Parallel()
	r, u := newRecv(t, Endpoint{ID: "p", Kind: RateEnforcing, Rate: 5, Burst: 1, RetryAfter: time.Second, HTTPDate: true})
	mustSend(t, u[0], "a")
	code, ra := mustSend(t, u[0], "b")
	sent := time.Now()
	deadline, err := http.ParseTime(ra)
	if code != 429 || err != nil {
		t.Fatalf("%d Retry-After %q (%v)", code, ra, err)
	}
	if deadline.Before(sent.Add(time.Second - 50*time.Millisecond)) {
		t.Fatalf("date %v asks for less than RetryAfter after %v", deadline, sent)
	}
	time.Sleep(time.Until(deadline) + 10*time.Millisecond)
	if code, _ := mustSend(t, u[0], "b"); code != 200 {
		t.Fatalf("after the deadline: %d, want 200", code)
	}
	if st := r.Stats("p"); st.Bans != 0 || st.Throttled != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDownRefusesThenRecovers(t *testing.T) {
	t.Parallel()
	r, u := newRecv(t, Endpoint{ID: "crm", Kind: Fast, DownFor: 300 * time.Millisecond}, Endpoint{ID: "dead", Kind: Down})
	for _, url := range u {
		if _, _, err := send(t, url, "e"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%s: %v, want connection refused", url, err)
		}
	}
	if up := r.Stats("crm").UpAt; !up.IsZero() {
		t.Fatalf("up at %v while refusing", up)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _, err := send(t, u[0], "e")
		if err == nil && code == 200 {
			if up := r.Stats("crm").UpAt; up.IsZero() || up.After(r.Arrivals("crm")[0].At) {
				t.Fatalf("up at %v, first arrival %v", up, r.Arrivals("crm")[0].At)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("endpoint did not come up: %d %v", code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, err := send(t, u[1], "e"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("down endpoint: %v, want connection refused", err)
	}
	if n := len(r.Arrivals("dead")); n != 0 {
		t.Fatalf("down endpoint recorded %d arrivals", n)
	}
}

func TestSlowGoneFlaky(t *testing.T) {
	t.Parallel()
	r, u := newRecv(t, Endpoint{ID: "slow", Kind: Slow, Delay: 100 * time.Millisecond}, Endpoint{ID: "gone", Kind: Gone},
		Endpoint{ID: "flaky", Kind: Flaky, FailShare: 0.3, ResetShare: 0.1})
	start := time.Now()
	if code, _ := mustSend(t, u[0], "e"); code != 200 || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("slow: %d after %v", code, time.Since(start))
	}
	if code, _ := mustSend(t, u[1], "e"); code != http.StatusGone || r.Stats("gone").Gone != 1 {
		t.Fatalf("gone: %d, stats %+v", code, r.Stats("gone"))
	}
	var ok, fail, reset int
	for range 200 {
		code, _, err := send(t, u[2], "e")
		switch {
		case err != nil:
			reset++
		case code == 200:
			ok++
		case code >= 500:
			fail++
		}
	}
	st := r.Stats("flaky")
	if reset != st.Resets || fail != st.Failed || ok+fail+reset != 200 || reset == 0 || fail == 0 || ok < 100 {
		t.Fatalf("client saw %d ok, %d 5xx, %d resets; endpoint %+v", ok, fail, reset, st)
	}
	for _, a := range r.Arrivals("flaky") {
		if (a.Status == 0) != (a.Status != 200 && a.Status < 500) {
			t.Fatalf("arrival %+v", a)
		}
	}
}

func TestSignaturesAreVerified(t *testing.T) {
	t.Parallel()
	sec, _ := tasks.NewSecret()
	r, u := newRecv(t, Endpoint{ID: "s", Kind: Fast, Secrets: []string{sec}})
	wh, _ := standardwebhooks.NewWebhook(sec)
	body := []byte(`{"id":"e1"}`)
	now := time.Now()
	sig, _ := wh.Sign("e1", now, body)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, u[0], bytes.NewReader(body))
	req.Header.Set("webhook-id", "e1")
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	if resp, err := plain.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	mustSend(t, u[0], "e2") // unsigned
	a := r.Arrivals("s")
	if len(a) != 2 || !a[0].SigOK || a[1].SigOK || r.Stats("s").BadSig != 1 {
		t.Fatalf("arrivals %+v, stats %+v", a, r.Stats("s"))
	}
}

func TestEndpointValidation(t *testing.T) {
	t.Parallel()
	r := NewReceiver(nil)
	defer r.Close()
	for _, e := range []Endpoint{
		{Kind: Fast},
		{ID: "x", Kind: "odd"},
		{ID: "x", Kind: RateEnforcing},
		{ID: "x", Kind: Slow},
		{ID: "x", Kind: Flaky, FailShare: 0.8, ResetShare: 0.5},
	} {
		if _, err := r.Add(e); err == nil {
			t.Errorf("%+v accepted", e)
		}
	}
}
