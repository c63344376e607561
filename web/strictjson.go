package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
)

// encoding/json matches a member name to a field ignoring case and lets
// the last of two equal names win, so {"ID":…} set id and
// {"url":"a","url":"b"} saved b. An API that refuses an unknown field
// refuses these too: strictNames reads the request's members before it is
// decoded, their names and whether each is a value (decode reports the
// values' types and the syntax).

// strictNames refuses the first member of body, in order, that no field
// of t (a request type) names exactly, that is given twice in one object,
// or that is null or "" (a field left out takes its default, one that is
// given must be a value; an event's data may be null), naming it by its
// dotted path. A value whose type decodes itself (an event's data, a
// time) is not looked into: its names are not the API's. Malformed JSON
// is left to decode.
func strictNames(body []byte, t reflect.Type, path string) *APIError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil
	}
	body = bytes.TrimSpace(body)
	switch {
	case t.Kind() == reflect.Struct && len(body) > 0 && body[0] == '{':
		names := memberNames(t)
		seen := map[string]bool{}
		dec := json.NewDecoder(bytes.NewReader(body))
		if _, err := dec.Token(); err != nil {
			return nil
		}
		for dec.More() {
			tok, err := dec.Token()
			name, ok := tok.(string)
			var v json.RawMessage
			if err != nil || !ok || dec.Decode(&v) != nil {
				return nil
			}
			at := dotted(path, name)
			f, known := names[name]
			switch raw := string(bytes.TrimSpace(v)); {
			case seen[name]:
				return apiErr(http.StatusBadRequest, "duplicate_field", at, "%q is given twice: give each field once", name)
			case !known:
				return unknownName(at, name, names)
			case at == "data":
			case raw == "null":
				return apiErr(http.StatusUnprocessableEntity, "invalid", at, "null is not a value here: leave %s out for its default", name)
			case raw == `""`:
				return apiErr(http.StatusUnprocessableEntity, "invalid", at, "empty: leave %s out for its default, or give a value", name)
			}
			seen[name] = true
			if ae := strictNames(v, f, at); ae != nil {
				return ae
			}
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && len(body) > 0 && body[0] == '[':
		var items []json.RawMessage
		if json.Unmarshal(body, &items) != nil {
			return nil
		}
		for _, item := range items {
			if ae := strictNames(item, t.Elem(), path); ae != nil {
				return ae
			}
		}
	}
	return nil
}

// memberNames maps the JSON names of struct t's fields to their types.
func memberNames(t reflect.Type) map[string]reflect.Type {
	names := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names[name] = f.Type
	}
	return names
}

// unknownName refuses name, saying which field it was meant to be when it
// differs from one only in case.
func unknownName(at, name string, names map[string]reflect.Type) *APIError {
	for known := range names {
		if strings.EqualFold(known, name) {
			return apiErr(http.StatusBadRequest, "unknown_field", at, "unknown field %q: names are case-sensitive, this one is %q", name, known)
		}
	}
	return apiErr(http.StatusBadRequest, "unknown_field", at, "unknown field %q", name)
}

func dotted(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
