package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// APIError is the body of every error answer: {"error": {...}}.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// RetryAfter, when set, is sent as the Retry-After header (whole
	// seconds, rounded up).
	RetryAfter time.Duration `json:"-"`
}

func (e *APIError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s (%d): %s: %s", e.Code, e.Status, e.Field, e.Message)
	}
	return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message)
}

func apiErr(status int, code, field, format string, args ...any) *APIError {
	return &APIError{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// toAPIError maps the producer's typed errors to statuses.
func toAPIError(err error) *APIError {
	var ae *APIError
	var fe *tasks.FieldError
	var netErr net.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &fe):
		return apiErr(http.StatusUnprocessableEntity, "invalid", apiField(fe.Field), "%s", fe.Msg)
	case errors.Is(err, producer.ErrInvalid):
		return apiErr(http.StatusUnprocessableEntity, "invalid", "", "%v", err)
	case errors.Is(err, producer.ErrUnknownTenant):
		return apiErr(http.StatusNotFound, "unknown_tenant", "", "%v", err)
	case errors.Is(err, producer.ErrTenantLimit):
		return apiErr(http.StatusConflict, "tenant_limit", "", "%v", err)
	case errors.Is(err, producer.ErrTenantDeleting):
		return apiErr(http.StatusConflict, "tenant_deleting", "", "%v", err)
	case errors.Is(err, producer.ErrUnknownToken):
		return apiErr(http.StatusNotFound, "unknown_token", "", "%v", err)
	case errors.Is(err, producer.ErrUnknownSubscriber):
		return apiErr(http.StatusNotFound, "unknown_subscriber", "", "%v", err)
	case errors.Is(err, producer.ErrUnknownDeadLetter):
		return apiErr(http.StatusNotFound, "unknown_dead_letter", "", "%v", err)
	case errors.Is(err, producer.ErrUnknownDelivery):
		return apiErr(http.StatusNotFound, "unknown_delivery", "", "%v", err)
	case errors.Is(err, producer.ErrUnknownEvent):
		return apiErr(http.StatusNotFound, "unknown_event", "", "%v", err)
	case errors.Is(err, producer.ErrPayloadExpired):
		return apiErr(http.StatusGone, "payload_expired", "", "%v", err)
	case errors.Is(err, producer.ErrDeliveryActive):
		return apiErr(http.StatusConflict, "delivery_active", "", "%v", err)
	case errors.Is(err, producer.ErrPayloadTooLarge):
		return apiErr(http.StatusRequestEntityTooLarge, "payload_too_large", "data", "%v", err)
	case errors.Is(err, producer.ErrBadCursor):
		return apiErr(http.StatusUnprocessableEntity, "invalid", "cursor", "not a cursor of this list: pass next_cursor as it was answered")
	case errors.Is(err, producer.ErrSubscriberRecreated):
		return apiErr(http.StatusConflict, "subscriber_recreated", "", "%v", err)
	case errors.Is(err, producer.ErrEventConflict):
		return apiErr(http.StatusConflict, "event_conflict", "id", "%v", err)
	case errors.Is(err, producer.ErrTooManySecrets):
		return apiErr(http.StatusConflict, "too_many_secrets", "secrets", "%v", err)
	case errors.Is(err, producer.ErrRedisUnavailable), errors.Is(err, redis.ErrClosed), errors.As(err, &netErr),
		errors.Is(err, io.EOF):
		ae := apiErr(http.StatusServiceUnavailable, "redis_unavailable", "", "%v", err)
		ae.RetryAfter = 5 * time.Second // a Redis restart or failover takes seconds
		return ae
	}
	return apiErr(http.StatusInternalServerError, "internal", "", "internal error")
}

// apiField names a tasks field as the API's JSON does.
func apiField(f string) string {
	switch {
	case f == "subscriber_id":
		return "id"
	case f == "limit" || strings.HasPrefix(f, "limit."):
		return "rate_" + f
	}
	return f
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)       // `<`, `>`, `&` as themselves: JSON, not HTML
	_ = enc.Encode(inUTCMillis(v)) // the client went away: nothing to do
}

// writeError answers with err as an APIError; extra fields (such as the
// targets of a partly failed publish) go beside "error".
func writeError(w http.ResponseWriter, log *slog.Logger, err error, extra map[string]any) {
	ae := toAPIError(err)
	// (a publish refused for want of a place is counted, not logged: a
	// spike refuses thousands a second; hooklane_web_publishes_shed_total)
	if ae.Status >= 500 && ae.Code != "overloaded" {
		log.Error("request failed", "status", ae.Status, "err", err)
	}
	if ae.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(ae.RetryAfter))
	}
	body := map[string]any{"error": ae}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, ae.Status, body)
}

// decode reads one JSON object of at most max bytes into dst, refusing
// unknown fields, a name spelt in another case or given twice, a field
// given as null or "" (see strictNames), and trailing data, so that a typo
// is an error instead of a silently ignored setting.
func decode(w http.ResponseWriter, r *http.Request, max int64, dst any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err == nil {
		// Malformed JSON is decode's to report, before any name in it.
		if json.Valid(body) {
			if ae := strictNames(body, reflect.TypeOf(dst), ""); ae != nil {
				return ae
			}
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(dst)
		if err == nil {
			if _, terr := dec.Token(); terr != io.EOF {
				err = errors.New("trailing data after the JSON object")
			}
		}
	}
	if err == nil {
		return nil
	}
	var tooBig *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var synErr *json.SyntaxError
	var fe *tasks.FieldError
	switch {
	case errors.As(err, &tooBig):
		return apiErr(http.StatusRequestEntityTooLarge, "body_too_large", "", "request body over %d bytes", tooBig.Limit)
	case errors.As(err, &typeErr):
		want, got := wanted(typeErr.Type), "a JSON "+strings.Fields(typeErr.Value + " value")[0]
		if raw, ok := rawAt(body, typeErr.Field); ok {
			got = shown(raw)
			if k := typeErr.Type.Kind(); raw[0] == '[' && k != reflect.Slice && k != reflect.Array {
				want = "an array whose entries are each " + want // an entry is the wrong type
			}
		}
		return apiErr(http.StatusBadRequest, "bad_json", typeErr.Field, "want %s, got %s", want, got)
	case errors.As(err, &synErr):
		return apiErr(http.StatusBadRequest, "bad_json", "", "malformed JSON at byte %d: %v", synErr.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apiErr(http.StatusBadRequest, "bad_json", "", "malformed JSON: the body ends inside a value")
	case errors.Is(err, io.EOF):
		return apiErr(http.StatusBadRequest, "bad_json", "", "empty body: want a JSON object")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return apiErr(http.StatusBadRequest, "unknown_field", name, "unknown field %q", name)
	case errors.As(err, &fe):
		return apiErr(http.StatusUnprocessableEntity, "invalid", apiField(fe.Field), "%s", fe.Msg)
	}
	if ae := badTime(body, dst); ae != nil {
		return ae
	}
	return apiErr(http.StatusBadRequest, "bad_json", "", "unreadable JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// timeWanted is what a time field wants, said the same way everywhere.
const timeWanted = "an RFC 3339 time such as 2026-12-02T15:04:05Z"

// wanted says in words what a field of type t wants: not its Go type.
func wanted(t reflect.Type) string {
	if t == reflect.TypeFor[time.Time]() {
		return timeWanted
	}
	switch t.Kind() {
	case reflect.Pointer:
		return wanted(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	}
	return "another JSON value"
}

// badTime names the time field of dst (a request: its times are at the
// top level) whose value is not a time, which encoding/json reports
// without the field's name. A value of another JSON type is a 400, like
// any; a string that is not an RFC 3339 time a 422, like a bad duration.
func badTime(body []byte, dst any) *APIError {
	t := reflect.TypeOf(dst)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	for _, f := range reflect.VisibleFields(t.Elem()) {
		if f.Type != reflect.TypeFor[time.Time]() && f.Type != reflect.TypeFor[*time.Time]() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		raw, ok := rawAt(body, name)
		var v time.Time
		if !ok || string(raw) == "null" || v.UnmarshalJSON(raw) == nil {
			continue
		}
		if raw[0] != '"' {
			return apiErr(http.StatusBadRequest, "bad_json", name, "want %s, got %s", timeWanted, shown(raw))
		}
		return apiErr(http.StatusUnprocessableEntity, "invalid", name, "want %s, got %s", timeWanted, shown(raw))
	}
	return nil
}

// rawAt returns the JSON value at a dotted field path ("rate_limit.rate")
// of body, as given; "" is body itself.
func rawAt(body []byte, path string) (json.RawMessage, bool) {
	v := json.RawMessage(bytes.TrimSpace(body))
	if path == "" {
		return v, len(v) > 0
	}
	for name := range strings.SplitSeq(path, ".") {
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			return nil, false
		}
		var ok bool
		if v, ok = m[name]; !ok {
			return nil, false
		}
	}
	return json.RawMessage(bytes.TrimSpace(v)), true
}

// shown is how an error quotes a refused value: a short scalar as the
// request spelt it, anything else by its kind, and never a secret.
func shown(raw json.RawMessage) string {
	switch {
	case len(raw) == 0:
		return "nothing"
	case raw[0] == '[':
		return "an array"
	case raw[0] == '{':
		return "a JSON object"
	case bytes.Contains(raw, []byte("whsec_")):
		return "a secret"
	}
	if r := []rune(string(raw)); len(r) > 40 {
		return string(r[:36]) + "…"
	}
	return string(raw)
}

// quoted is shown for a string from a query or a form: JSON-quoted.
func quoted(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return shown(b)
}
