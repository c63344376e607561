package limits

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateHint is what a receiver's rate-limit headers say
// (draft-ietf-httpapi-ratelimit-headers): the structured form of the
// current draft, `RateLimit: "default";r=0;t=5` and
// `RateLimit-Policy: "default";q=50;w=1`, and the earlier drafts'
// `RateLimit-Remaining: 0`, `RateLimit-Reset: 5`, `RateLimit-Limit: 50`
// (with `RateLimit-Policy: 50;w=1`). Anything unreadable is ignored.
type RateHint struct {
	Remaining int           // requests left in the window; -1 unknown
	Reset     time.Duration // until the quota comes back; 0 unknown
	Quota     int           // requests per Window; 0 unknown
	Window    time.Duration
}

// PerSecond is the policy's rate, 0 when unknown.
func (h RateHint) PerSecond() float64 {
	if h.Quota <= 0 || h.Window <= 0 {
		return 0
	}
	return float64(h.Quota) / h.Window.Seconds()
}

// Spent reports a quota used up, with when it comes back.
func (h RateHint) Spent() bool { return h.Remaining == 0 && h.Reset > 0 }

// ReadRateHint reads hdr's rate-limit headers; ok is false when there are
// none it can read.
func ReadRateHint(hdr http.Header) (RateHint, bool) {
	h := RateHint{Remaining: -1}
	ok := false
	// The structured forms: the lowest remaining of the listed limits.
	for _, item := range items(hdr.Values("RateLimit")) {
		p := params(item)
		if r, err := strconv.Atoi(p["r"]); err == nil && r >= 0 && (h.Remaining < 0 || r < h.Remaining) {
			h.Remaining, ok = r, true
			if t, err := strconv.Atoi(p["t"]); err == nil && t >= 0 {
				h.Reset = time.Duration(t) * time.Second
			}
		}
	}
	for _, item := range items(hdr.Values("RateLimit-Policy")) {
		p := params(item)
		q, err := strconv.Atoi(p["q"])
		if err != nil { // an earlier draft's "50;w=1"
			q, err = strconv.Atoi(strings.TrimSpace(strings.SplitN(item, ";", 2)[0]))
		}
		w, werr := strconv.Atoi(p["w"])
		if err != nil || q <= 0 || werr != nil || w <= 0 {
			continue
		}
		if rate := float64(q) / float64(w); h.Quota == 0 || rate < h.PerSecond() {
			h.Quota, h.Window, ok = q, time.Duration(w)*time.Second, true
		}
	}
	if h.Remaining < 0 {
		if r, err := strconv.Atoi(strings.TrimSpace(hdr.Get("RateLimit-Remaining"))); err == nil && r >= 0 {
			h.Remaining, ok = r, true
			if t, err := strconv.Atoi(strings.TrimSpace(hdr.Get("RateLimit-Reset"))); err == nil && t >= 0 {
				h.Reset = time.Duration(t) * time.Second
			}
		}
	}
	return h, ok
}

// items splits comma-separated list members (quoted strings aside: the
// draft's names are tokens or simple strings).
func items(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, it := range strings.Split(v, ",") {
			if it = strings.TrimSpace(it); it != "" {
				out = append(out, it)
			}
		}
	}
	return out
}

// params reads an item's ;key=value parameters.
func params(item string) map[string]string {
	p := map[string]string{}
	for _, kv := range strings.Split(item, ";")[1:] {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			p[strings.ToLower(k)] = strings.Trim(v, `"`)
		}
	}
	return p
}
