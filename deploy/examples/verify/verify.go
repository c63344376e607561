// Package verify checks a hooklane request's Standard Webhooks signature: copy it into a receiver.
package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Tolerance is how far webhook-timestamp may be from now: a request captured and replayed later fails.
const Tolerance = 5 * time.Minute

// Signature returns nil when a webhook-signature entry is the HMAC-SHA256 of
// "<webhook-id>.<webhook-timestamp>.<body>" under secret. body: the raw request body.
func Signature(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return errors.New("the secret is not whsec_ and base64")
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if d := now.Sub(time.Unix(sec, 0)); id == "" || err != nil || d > Tolerance || d < -Tolerance {
		return errors.New("no webhook-id, or no webhook-timestamp within 5 minutes of now")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(h.Get("webhook-signature")) {
		sig, ok := strings.CutPrefix(s, "v1,")
		got, err := base64.StdEncoding.DecodeString(sig)
		if ok && err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no webhook-signature entry matches")
}
