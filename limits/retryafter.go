package limits

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryAfter is a parsed Retry-After header value (RFC 9110 section
// 10.2.3): a delay in delta-seconds, or an absolute time (At) from an
// HTTP-date in any of the three forms http.ParseTime accepts.
type RetryAfter struct {
	After time.Duration
	At    time.Time
}

// ReadRetryAfter parses a Retry-After value. ok is false when it is empty,
// negative or unparseable: the caller then falls back to its own backoff.
// A delay too large to represent reads as a very long one (capped later).
func ReadRetryAfter(value string) (ra RetryAfter, ok bool) {
	v := strings.TrimSpace(value)
	if v == "" {
		return ra, false
	}
	if isDigits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(maxDelay/time.Second) { // overflow
			return RetryAfter{After: maxDelay}, true
		}
		return RetryAfter{After: time.Duration(secs) * time.Second}, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return ra, false
	}
	return RetryAfter{At: t}, true
}

// maxDelay is far beyond any cap a caller sets, and representable.
const maxDelay = 100 * 365 * 24 * time.Hour

// Deadline is when the wait ends for an answer received at now: a past
// date means "due now"; the result is capped at now+ceiling, because a
// broken or hostile endpoint can ask for a week.
func (ra RetryAfter) Deadline(now time.Time, ceiling time.Duration) time.Time {
	d := ra.After
	if !ra.At.IsZero() {
		d = ra.At.Sub(now)
	}
	return now.Add(min(max(d, 0), ceiling))
}

// ParseRetryAfter returns the deadline a Retry-After header value names,
// received at now, capped at now+max (see ReadRetryAfter and Deadline).
func ParseRetryAfter(value string, now time.Time, max time.Duration) (deadline time.Time, ok bool) {
	ra, ok := ReadRetryAfter(value)
	if !ok {
		return time.Time{}, false
	}
	return ra.Deadline(now, max), true
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
