package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// maxResponseBody is all of a response hooklane reads; the rest is dropped.
const maxResponseBody = 64 << 10

func newHTTPClient(c Config) *http.Client {
	dialer := &net.Dialer{Timeout: c.ConnectTimeout, KeepAlive: 30 * time.Second, Control: dialControl(c.AllowedCIDRs), Resolver: c.Resolver}
	return &http.Client{
		Timeout: c.RequestTimeout,
		Transport: &http.Transport{
			Proxy:                  nil, // a proxy from the environment would bypass per-destination policy
			DialContext:            dialer.DialContext,
			TLSHandshakeTimeout:    c.ConnectTimeout,
			MaxIdleConns:           1024,
			MaxIdleConnsPerHost:    128,
			IdleConnTimeout:        90 * time.Second,
			MaxResponseHeaderBytes: maxResponseBody,
			ForceAttemptHTTP2:      true,
		},
		// A redirect is the receiver's misconfiguration; following it would
		// send a signed event somewhere the subscriber did not register.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// response is what one POST produced.
type response struct {
	status     int
	retryAfter string
	// raIgnored: retryAfter is set but neither delay-seconds nor an
	// HTTP-date, so it cannot be obeyed (limits.ReadRetryAfter, the
	// parse the cooldown uses).
	raIgnored bool
	received  time.Time
	latency   time.Duration
	body      []byte // the first Config.ResponseBody bytes of the body
	err       error  // transport error: no status
	// sent are the request's headers, its signature cut (redactSignature):
	// nil when no request was made. headers are the answer's kept
	// (keepHeaders), cut the number left out.
	sent    []tasks.Header
	headers []tasks.Header
	cut     int
}

// sign returns the webhook-signature header value: one "v1,<base64>" per
// secret, space separated, so receivers can verify during a rotation.
func sign(secrets []string, msgID string, ts time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			return "", fmt.Errorf("secret unusable: %w", err)
		}
		sig, err := wh.Sign(msgID, ts, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// post sends body (the stored event, byte for byte as published) to sub,
// signed, with event id eventID, and reads at most maxResponseBody of the
// answer, keeping its first keep bytes. headers, when not nil, runs as
// soon as the status line and headers are in, before the body is read: a
// 429's cooldown is recorded then, not after up to 64 KiB of body, while
// other requests could slip out.
func post(ctx context.Context, client *http.Client, sub *tasks.Subscriber, eventID string, body []byte, keep int, headers func(status int, h http.Header, at time.Time)) response {
	start := time.Now()
	// A rotated-out secret keeps signing until its grace ends, so the
	// receiver can move to the new one without refusing a request.
	sig, err := sign(sub.SigningSecrets(start), eventID, start, body)
	if err != nil {
		return response{err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.URL, bytes.NewReader(body))
	if err != nil {
		return response{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hooklane/"+Version)
	req.Header.Set(standardwebhooks.HeaderWebhookID, eventID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(start.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	sent := sentHeaders(req.Header)
	resp, err := client.Do(req)
	if err != nil {
		// The error text reaches asynqmon and the dead-letter ledger: keep
		// a query string (where some receivers put a token) out of it.
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redactURL(ue.URL)
		}
		return response{err: err, received: time.Now(), latency: time.Since(start), sent: sent}
	}
	received := time.Now()
	if headers != nil {
		headers(resp.StatusCode, resp.Header, received)
	}
	var kept bytes.Buffer
	rest := io.LimitReader(resp.Body, maxResponseBody)
	_, err = io.CopyN(&kept, rest, int64(max(keep, 0)))
	if err == nil {
		_, err = io.Copy(io.Discard, rest)
	} else if errors.Is(err, io.EOF) {
		err = nil
	}
	resp.Body.Close()
	r := response{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"),
		received: received, latency: time.Since(start), body: kept.Bytes(), sent: sent}
	r.headers, r.cut = keepHeaders(resp.Header)
	if r.retryAfter != "" {
		_, ok := limits.ReadRetryAfter(r.retryAfter)
		r.raIgnored = !ok
	}
	if err != nil && resp.StatusCode/100 != 2 {
		r.err = fmt.Errorf("HTTP %d, then reading the body: %w", resp.StatusCode, err)
	}
	return r
}

// redactURL drops the query and fragment of raw.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	u.Fragment, u.User = "", nil
	return u.String()
}

// sentHeaders lists a request's headers in name order, each signature cut
// to its version and first characters: enough to tell which secret signed
// it and to match a receiver's log, not to replay the request.
func sentHeaders(h http.Header) []tasks.Header {
	var out []tasks.Header
	for _, name := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[name] {
			if name == http.CanonicalHeaderKey(standardwebhooks.HeaderWebhookSignature) {
				v = redactSignature(v)
			}
			out = append(out, tasks.Header{Name: name, Value: v})
		}
	}
	return out
}

// signatureShown is how much of a signature's base64 is kept.
const signatureShown = 6

// redactSignature cuts each "v1,<base64>" of a webhook-signature value to
// "v1,<first characters>…".
func redactSignature(v string) string {
	sigs := strings.Fields(v)
	for i, s := range sigs {
		version, mac, _ := strings.Cut(s, ",")
		sigs[i] = version + "," + mac[:min(len(mac), signatureShown)] + "…"
	}
	return strings.Join(sigs, " ")
}

// secretHeaders are response headers whose values are the receiver's
// credentials: kept by name only.
var secretHeaders = map[string]bool{"Set-Cookie": true, "Authorization": true, "Proxy-Authorization": true, "Cookie": true}

// keepHeaders is the bounded subset of a response's headers an attempt
// keeps (tasks.MaxResponseHeaders, tasks.MaxResponseHeaderBytes), in name
// order, values as valid UTF-8; cut is how many were left out. A value
// that does not fit the bytes left is cut short with "…".
func keepHeaders(h http.Header) (kept []tasks.Header, cut int) {
	left := tasks.MaxResponseHeaderBytes
	for _, name := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[name] {
			if secretHeaders[name] {
				v = "(not kept)"
			}
			v = strings.ToValidUTF8(v, "\uFFFD")
			if len(kept) == tasks.MaxResponseHeaders || left < len(name)+len("…") {
				cut++
				continue
			}
			left -= len(name)
			if len(v) > left {
				v = strings.ToValidUTF8(v[:max(left-len("…"), 0)], "") + "…"
			}
			left -= len(v)
			kept = append(kept, tasks.Header{Name: name, Value: v})
		}
	}
	return kept, cut
}
