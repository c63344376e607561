package tasks

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The stored event: every event is kept once, whatever its number of
// subscribers (Keys.Event), as a hash:
//
//	b  the request body every subscriber is sent (EventBody), byte for byte
//	p  when it was first published, Unix ms in Redis' clock
//	h  its digest (EventDigest): a re-publish of the id with another type
//	   or data is refused, never sent as the first event
//	s  the subscribers it was published to, space-separated
//
// Its rules (what it holds, how long it lives, how a re-publish is
// compared) are here and in producer/events.go, which writes it.

// Stored-event fields.
const (
	EventFieldBody      = "b"
	EventFieldPublished = "p"
	EventFieldDigest    = "h"
	EventFieldSubs      = "s"
)

// EventBody is the JSON request body of ev: {"id","type","timestamp","data"}
// with data exactly as the publisher gave it, whitespace and escapes
// included (json.Marshal would compact it), and no HTML escaping of the
// strings: a receiver that hashes or logs the raw body sees what was
// published.
func EventBody(ev Event) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteString(`{"id":`)
	_ = enc.Encode(ev.ID) // a string always encodes
	b.Truncate(b.Len() - 1)
	b.WriteString(`,"type":`)
	_ = enc.Encode(ev.Type)
	b.Truncate(b.Len() - 1)
	b.WriteString(`,"timestamp":`)
	_ = enc.Encode(ev.Timestamp.UTC())
	b.Truncate(b.Len() - 1)
	b.WriteString(`,"data":`)
	b.Write(ev.Data)
	b.WriteByte('}')
	return b.Bytes()
}

// EventDigest names what makes an event the same event: its type and its
// data as a JSON value (object keys in any order, any whitespace, numbers
// compared by their digits), not its bytes, and not its timestamp or
// not-before time. A client that retries with re-serialized JSON, or
// without a timestamp, publishes the same event.
func EventDigest(typ string, data json.RawMessage) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("data: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(typ))
	h.Write([]byte{0})
	canonical(h, v)
	return hex.EncodeToString(h.Sum(nil)), nil
}

type writer interface{ Write([]byte) (int, error) }

// canonical writes v with object keys sorted and numbers as their decimal
// value (1.0 and 1 are the same number).
func canonical(w writer, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w.Write([]byte{'{'})
		for i, k := range keys {
			if i > 0 {
				w.Write([]byte{','})
			}
			kb, _ := json.Marshal(k)
			w.Write(kb)
			w.Write([]byte{':'})
			canonical(w, x[k])
		}
		w.Write([]byte{'}'})
	case []any:
		w.Write([]byte{'['})
		for i, e := range x {
			if i > 0 {
				w.Write([]byte{','})
			}
			canonical(w, e)
		}
		w.Write([]byte{']'})
	case json.Number:
		// Exactly, as a fraction: 1, 1.0 and 10e-1 are one number; no
		// float rounds two long ones into the same.
		if r, ok := new(big.Rat).SetString(string(x)); ok {
			w.Write([]byte(r.RatString()))
		} else {
			w.Write([]byte(x))
		}
	default:
		b, _ := json.Marshal(x) // strings, bools, null
		w.Write(b)
	}
}

// StoredEvent is an event as kept for its payload retention.
type StoredEvent struct {
	Event       Event
	Body        []byte // what each subscriber is sent
	PublishedAt time.Time
	Digest      string   // "" for an event stored by the release before
	Subscribers []string // sorted
}

// ParseStoredEvent reads a stored event's hash (HGETALL); ok is false when
// it is empty or unreadable (no such event).
func ParseStoredEvent(h map[string]string) (StoredEvent, bool) {
	body, ok := h[EventFieldBody]
	if !ok {
		return StoredEvent{}, false
	}
	var ev Event
	if json.Unmarshal([]byte(body), &ev) != nil {
		return StoredEvent{}, false
	}
	ms, _ := strconv.ParseInt(h[EventFieldPublished], 10, 64)
	subs := strings.Fields(h[EventFieldSubs])
	slices.Sort(subs)
	return StoredEvent{Event: ev, Body: []byte(body), PublishedAt: time.UnixMilli(ms).UTC(), Digest: h[EventFieldDigest],
		Subscribers: subs}, true
}

// ParseLegacyEvent reads the value of a stored event of the release before
// (Keys.LegacyEvent): "<published Unix ms> <subscriber id> …\n<Event
// JSON>".
func ParseLegacyEvent(v string) (StoredEvent, bool) {
	head, body, found := strings.Cut(v, "\n")
	fields := strings.Fields(head)
	var ev Event
	if !found || len(fields) == 0 || json.Unmarshal([]byte(body), &ev) != nil {
		return StoredEvent{}, false
	}
	ms, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return StoredEvent{}, false
	}
	subs := fields[1:]
	slices.Sort(subs)
	return StoredEvent{Event: ev, Body: []byte(body), PublishedAt: time.UnixMilli(ms).UTC(), Subscribers: subs}, true
}
