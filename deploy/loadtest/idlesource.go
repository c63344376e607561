package loadtest

import (
	"strconv"
	"strings"

	"github.com/hooklane/hooklane/tasks"
)

// A monitored command: one line of MONITOR's output.
type monitored struct {
	client string   // "127.0.0.1:53422", or "lua" for a command run by a script
	args   []string // the command's name (lower case) and arguments
}

// parseMonitor reads one MONITOR line:
//
//	1733238000.123456 [0 127.0.0.1:53422] "evalsha" "3b1c…" "4" "asynq:{q}:pending" …
func parseMonitor(line string) (monitored, bool) {
	open := strings.IndexByte(line, '[')
	end := strings.IndexByte(line, ']')
	if open < 0 || end < open {
		return monitored{}, false
	}
	_, client, _ := strings.Cut(line[open+1:end], " ")
	var m monitored
	m.client = client
	rest := line[end+1:]
	for {
		i := strings.IndexByte(rest, '"')
		if i < 0 {
			break
		}
		rest = rest[i:]
		arg, n, ok := unquoteMonitor(rest)
		if !ok {
			break
		}
		m.args = append(m.args, arg)
		rest = rest[n:]
	}
	if len(m.args) == 0 {
		return monitored{}, false
	}
	m.args[0] = strings.ToLower(m.args[0])
	return m, true
}

// unquoteMonitor reads the quoted argument s starts with (Redis escapes
// \" \\ \n \r \t \a \b and \xNN) and returns it and its length in s.
func unquoteMonitor(s string) (string, int, bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i + 1, true
		case '\\':
			if i+1 >= len(s) {
				return "", 0, false
			}
			i++
			switch s[i] {
			case 'x':
				if i+2 < len(s) {
					if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
						b.WriteByte(byte(v))
						i += 2
						continue
					}
				}
				b.WriteByte('x')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, false
}

// firstKey is the key a command works on: a script's first key, else its
// first argument.
func (m monitored) firstKey() string {
	switch m.args[0] {
	case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
		if len(m.args) > 3 && m.args[2] != "0" {
			return m.args[3]
		}
		return ""
	}
	if len(m.args) > 1 {
		return m.args[1]
	}
	return ""
}

// idleSource names the loop of a worker of namespace keys that sent m,
// given the regions it serves and the subscribers it knows: one of
// asynq's (per Server: its processor's dequeue polls, its forwarder,
// heartbeater, janitor, recoverer, and its cancelation subscriber's
// keep-alive PINGs) or one of hooklane's (the dispatcher, the rescuer,
// the region watch, the aggregates, the dead-letter reports).
func idleSource(keys tasks.Keys, regions, subs []string, m monitored) string {
	key := m.firstKey()
	switch cmd := m.args[0]; {
	case cmd == "ping":
		return "asynq subscriber: pub/sub keep-alive PING"
	case cmd == "subscribe" || cmd == "psubscribe":
		return "asynq subscriber: SUBSCRIBE"
	case strings.HasPrefix(key, "asynq:servers") || strings.HasPrefix(key, "asynq:workers"):
		return "asynq heartbeater"
	case strings.HasPrefix(key, "asynq:{") && strings.HasPrefix(cmd, "eval"):
		switch {
		case strings.HasSuffix(key, "}:pending"):
			return "asynq processor: dequeue poll"
		case strings.HasSuffix(key, "}:scheduled") || strings.HasSuffix(key, "}:retry"):
			return "asynq forwarder"
		case strings.HasSuffix(key, "}:completed"):
			return "asynq janitor"
		case strings.HasSuffix(key, "}:lease") || strings.HasSuffix(key, "}:aggregation_sets"):
			return "asynq recoverer"
		}
		return "asynq: " + cmd + " " + key
	case strings.HasPrefix(key, "asynq:{") || key == tasks.AsynqQueues || key == keys.Layout() || key == keys.RegionSubscribers():
		return "hooklane region watch"
	case key == keys.SubscriberIDs() || key == keys.Totals() || key == keys.DeadReportsDue():
		return map[string]string{keys.SubscriberIDs(): "hooklane rescuer", keys.Totals(): "hooklane aggregates",
			keys.DeadReportsDue(): "hooklane dead-letter reports"}[key]
	case strings.HasPrefix(key, keys.Totals()) || key == keys.Cooling():
		return "hooklane aggregates"
	}
	for _, r := range regions {
		switch key {
		case keys.Ready(r), keys.Claimed(r):
			return "hooklane dispatcher: claim"
		case keys.Rescuer(r), keys.RescuerCursor(r):
			return "hooklane rescuer"
		}
	}
	for _, id := range subs {
		if key == keys.Gates(id).Lot || key == keys.Gate(id) {
			return "hooklane rescuer" // its overdue check of one subscriber
		}
	}
	return "other: " + m.args[0] + " " + key
}
