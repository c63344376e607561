package web

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The API writes a duration in ISO 8601 (PT1S, PT24H, P7D is written
// PT168H: hours are exact, days are not always 24 of them), and reads
// either that or a Go duration (1s, 24h, 1m30s), so that what a GET
// answered can be PUT back and what clients sent before still works.

// isoDuration is d in ISO 8601: PT<h>H<m>M<s>S, each part left out when
// zero, the seconds with the fraction they have; PT0S for zero.
func isoDuration(d time.Duration) string {
	if d == 0 {
		return "PT0S"
	}
	var b strings.Builder
	if d < 0 {
		b.WriteByte('-')
		d = -d
	}
	b.WriteString("PT")
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dH", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dM", m)
		d -= m * time.Minute
	}
	if d > 0 {
		b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
		b.WriteByte('S')
	}
	return b.String()
}

// isoForm is the part of ISO 8601's durations the API reads: weeks, days
// (24 hours), hours, minutes and seconds; not years or months, whose
// length depends on the date.
var isoForm = regexp.MustCompile(`^P(?:([0-9]+)W)?(?:([0-9]+)D)?(?:T(?:([0-9]+)H)?(?:([0-9]+)M)?(?:([0-9]+(?:\.[0-9]+)?)S)?)?$`)

// parseDuration reads a duration as the API takes one: ISO 8601 (PT1S,
// P7D, PT1H30M) or Go's (1s, 168h, 1h30m).
func parseDuration(s string) (time.Duration, error) {
	if !strings.HasPrefix(s, "P") {
		return time.ParseDuration(s)
	}
	m := isoForm.FindStringSubmatch(s)
	if m == nil || s == "P" || strings.HasSuffix(s, "T") {
		return 0, fmt.Errorf("not an ISO 8601 duration of weeks, days, hours, minutes and seconds: %q", s)
	}
	var total float64
	for i, unit := range []time.Duration{7 * 24 * time.Hour, 24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] == "" {
			continue
		}
		v, err := strconv.ParseFloat(m[i+1], 64)
		if err != nil {
			return 0, err
		}
		total += v * float64(unit)
	}
	if total > math.MaxInt64 {
		return 0, fmt.Errorf("duration %q is too long", s)
	}
	return time.Duration(math.Round(total)), nil
}
