package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
)

// newMonitor is the upstream asynqmon UI and its API, rooted at root. It
// shows every task's payload and result through Redact: hooklane's payloads
// carry no secrets by design (the worker reads them from the subscriber),
// but a payload written by anything else, or by a future bug, must still
// not put a signing secret on an operator's screen.
//
// It is read-only unless writes is set: its buttons act on asynq alone,
// around hooklane's ledger and bookkeeping (archiving a task from the UI
// leaves no dead letter, deleting one loses it, running one skips its
// pacing). hooklane's API does the same things and keeps the books.
func newMonitor(root string, opt asynq.RedisConnOpt, writes bool) *asynqmon.HTTPHandler {
	return asynqmon.New(asynqmon.Options{
		RootPath:         root,
		RedisConnOpt:     opt,
		ReadOnly:         !writes,
		PayloadFormatter: asynqmon.PayloadFormatterFunc(func(_ string, b []byte) string { return Redact(b) }),
		ResultFormatter:  asynqmon.ResultFormatterFunc(func(_ string, b []byte) string { return Redact(b) }),
	})
}

// secretPattern matches a Standard Webhooks secret, whatever its length or
// base64 alphabet, and a bare "whsec_" prefix.
var secretPattern = regexp.MustCompile(`whsec_[A-Za-z0-9+/=_\-]*`)

// maxShown caps what the UI gets of one payload.
const maxShown = 64 << 10

// Redact renders a task payload for display: JSON is decoded (so an escaped
// "whsec\u005f…" is caught too), every string that holds a secret is
// replaced, and the result is re-encoded indented; anything else is shown
// as text with secrets replaced, or summarized when it is not UTF-8. It
// accepts any bytes.
func Redact(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if json.Valid(b) {
		var v any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber() // keep numbers exactly as sent
		if dec.Decode(&v) == nil {
			var out bytes.Buffer
			enc := json.NewEncoder(&out)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if enc.Encode(redactValue(v)) == nil {
				return clip(string(bytes.TrimSuffix(out.Bytes(), []byte("\n"))))
			}
		}
	}
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes, not UTF-8 text: not shown)", len(b))
	}
	return clip(secretPattern.ReplaceAllString(string(b), "whsec_[redacted]"))
}

func redactValue(v any) any {
	switch x := v.(type) {
	case string:
		return secretPattern.ReplaceAllString(x, "whsec_[redacted]")
	case []any:
		for i := range x {
			x[i] = redactValue(x[i])
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[secretPattern.ReplaceAllString(k, "whsec_[redacted]")] = redactValue(val)
		}
		return out
	}
	return v
}

// clip cuts s to maxShown bytes on a rune boundary. It runs after
// redaction, so a cut cannot expose the tail of a secret.
func clip(s string) string {
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n… (%d more bytes not shown)", len(s)-cut)
}
