package tasks

import (
	"strconv"
	"strings"
	"time"
)

// DurationWords writes d as a person would: "7 days", "24 hours",
// "90 minutes", "90 seconds", "2 days 12 hours", "1.5 seconds", not
// time.Duration's "168h0m0s". It is for messages and pages; the API's
// JSON keeps Go durations ("24h0m0s"), which a client parses.
//
// One unit when d is a whole number of it and less than two of the next
// unit up (36 hours, 90 seconds: as said aloud), or a whole number of the
// largest unit (7 days, 1 hour); days from two days up (a day is said as
// 24 hours). Anything else is spelt unit by unit, largest first.
func DurationWords(d time.Duration) string {
	if d < 0 {
		return "minus " + DurationWords(-d)
	}
	if d%time.Second != 0 {
		switch {
		case d < time.Millisecond:
			return d.String()
		case d < time.Second && d%time.Millisecond == 0:
			return count(int64(d/time.Millisecond), "millisecond")
		case d < time.Minute:
			return strconv.FormatFloat(d.Round(time.Millisecond).Seconds(), 'f', -1, 64) + " seconds"
		}
		return DurationWords(d.Truncate(time.Second)) + " " + DurationWords(d%time.Second)
	}
	if d == 0 {
		return "0 seconds"
	}
	const day = 24 * time.Hour
	units := []struct {
		size time.Duration
		name string
	}{{day, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}}
	for i, u := range units {
		if d%u.size != 0 || u.size == day && d < 2*day {
			continue
		}
		if i == 0 || d < 2*units[i-1].size {
			return count(int64(d/u.size), u.name)
		}
		break
	}
	var parts []string
	for _, u := range units {
		if u.size == day && d < 2*day {
			continue
		}
		if n := d / u.size; n > 0 {
			parts = append(parts, count(int64(n), u.name))
			d -= n * u.size
		}
	}
	return strings.Join(parts, " ")
}

func count(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}
