package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/hooklane/hooklane/tasks"
)

// What the delivery page shows of each request: the headers it was sent
// with (the worker keeps each signature cut to a few characters, never
// whole), the body sent (the stored event, the same for every attempt),
// and the answer: status, latency, the headers and body the worker kept.

type attemptView struct {
	tasks.Attempt
	N       int
	Class   string // delivered, throttled, failed
	Body    string // the response body kept, secrets redacted
	Latency string // "" when no request was made
	Open    bool   // its headers shown unfolded: the newest attempt's
}

func attemptViews(as []tasks.Attempt) []attemptView {
	out := make([]attemptView, len(as))
	for i, a := range as {
		for _, hs := range [][]tasks.Header{a.RequestHeaders, a.ResponseHeaders} {
			for j := range hs {
				hs[j].Value = secretPattern.ReplaceAllString(hs[j].Value, "whsec_[redacted]")
			}
		}
		out[i] = attemptView{Attempt: a, N: i + 1, Class: attemptClass(a), Body: Redact([]byte(a.Body)),
			Latency: latency(a), Open: i == len(as)-1}
	}
	return out
}

// latency is an attempt's, whenever a request was made (its headers are
// kept, or it was answered): a request answered within the millisecond is
// "< 1 ms", not left out.
func latency(a tasks.Attempt) string {
	switch {
	case len(a.RequestHeaders) == 0 && a.Status == 0:
		return "" // no request (interrupted, lost with its worker), or a release before's transport error
	case a.LatencyMS == 0:
		return "< 1 ms"
	}
	return fmt.Sprintf("%d ms", a.LatencyMS)
}

// redactSent shows the body sent byte for byte, unless it holds a secret:
// one written plainly is replaced where it stands; one that only decoding
// reveals (an escaped "whsec\u005f…") falls back to Redact's re-encoded
// form, with every secret replaced.
func redactSent(b []byte) string {
	if !utf8.Valid(b) {
		return Redact(b)
	}
	s := secretPattern.ReplaceAllString(string(b), "whsec_[redacted]")
	var v any
	if json.Unmarshal([]byte(s), &v) == nil {
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		if enc.Encode(v) != nil || secretPattern.Match(bytes.ReplaceAll(out.Bytes(), []byte("whsec_[redacted]"), nil)) {
			return Redact(b)
		}
	}
	return clip(s)
}
