package web

import (
	"reflect"
	"sync"
	"time"
)

// Every time in an answer is RFC 3339 in UTC to the millisecond at most
// ("2026-07-11T08:14:59.123Z"), what Redis keeps, whatever it was made
// from: a ledger entry's replay time, a rotation's grace, a cooldown read
// in the process's zone. It is decided here, once, for every answer
// writeJSON writes (the CLI prints the answers it decodes, times as they
// came), instead of in each view: a new field cannot forget it.

var timeType = reflect.TypeFor[time.Time]()

// inUTCMillis returns v with every time.Time in what it answers (exported
// fields not tagged json:"-") in UTC and truncated to the millisecond. It
// copies what holds a time, never changes v: the values answered may be
// shared with the producer's.
func inUTCMillis(v any) any {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || !holdsTime(rv.Type()) {
		return v
	}
	return utcMillis(rv).Interface()
}

func utcMillis(v reflect.Value) reflect.Value {
	t := v.Type()
	if t == timeType {
		return reflect.ValueOf(v.Interface().(time.Time).UTC().Truncate(time.Millisecond))
	}
	if !holdsTime(t) {
		return v
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return v
		}
		e := utcMillis(v.Elem())
		if v.Kind() == reflect.Interface {
			out := reflect.New(t).Elem()
			out.Set(e)
			return out
		}
		out := reflect.New(t.Elem())
		out.Elem().Set(e)
		return out
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeSlice(t, v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(utcMillis(v.Index(i)))
		}
		return out
	case reflect.Array:
		out := reflect.New(t).Elem()
		for i := range v.Len() {
			out.Index(i).Set(utcMillis(v.Index(i)))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), utcMillis(it.Value()))
		}
		return out
	case reflect.Struct:
		out := reflect.New(t).Elem()
		out.Set(v)
		for i := range t.NumField() {
			if answered(t.Field(i)) {
				out.Field(i).Set(utcMillis(v.Field(i)))
			}
		}
		return out
	}
	return v
}

// answered reports whether a struct field is written in an answer.
func answered(f reflect.StructField) bool { return f.IsExported() && f.Tag.Get("json") != "-" }

var holds sync.Map // reflect.Type → bool

// holdsTime reports whether a value of type t may hold a time.Time in a
// field an answer writes (an interface may hold anything).
func holdsTime(t reflect.Type) bool {
	if v, ok := holds.Load(t); ok {
		return v.(bool)
	}
	h := findTime(t, map[reflect.Type]bool{})
	holds.Store(t, h)
	return h
}

// findTime is holdsTime without the cache; seen are the types on the way
// to t, which hold a time only through another field.
func findTime(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == timeType || t.Kind() == reflect.Interface {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	defer delete(seen, t)
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return findTime(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if answered(t.Field(i)) && findTime(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}
