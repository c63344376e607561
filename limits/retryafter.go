package limits

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter returns the deadline a Retry-After header value names,
// received at now. The value is either delta-seconds or an HTTP-date in any of
// the three forms http.ParseTime accepts (RFC 9110 section 10.2.3).
//
// A date in the past means "due now" and returns now. The result is capped at
// now+max, because a broken or hostile endpoint can ask for a week. ok is false
// when the value is empty, negative or unparseable: the caller then falls back
// to its own backoff.
func ParseRetryAfter(value string, now time.Time, max time.Duration) (deadline time.Time, ok bool) {
	v := strings.TrimSpace(value)
	if v == "" {
		return time.Time{}, false
	}
	if isDigits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(max/time.Second) { // overflow or beyond the cap
			return now.Add(max), true
		}
		return now.Add(time.Duration(secs) * time.Second), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, false
	}
	switch {
	case t.Before(now):
		return now, true
	case t.Sub(now) > max:
		return now.Add(max), true
	}
	return t, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// CeilSecond rounds t up to a whole second. asynq stores scheduled and retry
// times as whole Unix seconds, truncating; scheduling at CeilSecond(t) is what
// keeps a task from becoming due before t.
func CeilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}
