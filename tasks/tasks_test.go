package tasks_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

func TestMatches(t *testing.T) {
	tests := []struct {
		filter []string
		typ    string
		want   bool
	}{
		{nil, "anything", true},
		{[]string{"video.trending"}, "video.trending", true},
		{[]string{"video.trending"}, "video.trending.eu", false},
		{[]string{"video.*"}, "video.trending", true},
		{[]string{"video.*"}, "video", false},
		{[]string{"video.*"}, "videos.x", false},
		{[]string{"a", "video.*"}, "video.x.y", true},
		// Operator events go only to those that name them.
		{nil, tasks.OperatorFailing, false},
		{[]string{"hooklane.*"}, tasks.OperatorFailing, true},
		{[]string{tasks.OperatorDead}, tasks.OperatorDead, true},
		{[]string{tasks.OperatorDead}, tasks.OperatorFailing, false},
	}
	for _, tt := range tests {
		s := tasks.Subscriber{EventTypes: tt.filter}
		if got := s.Matches(tt.typ); got != tt.want {
			t.Errorf("filter %v, type %q: %v, want %v", tt.filter, tt.typ, got, tt.want)
		}
	}
}

func TestOperatorTypesAreNotLookedUpInTheUnfilteredIndex(t *testing.T) {
	ns := tasks.Keys("n")
	for _, k := range ns.IndexKeysFor(tasks.DefaultTenant, tasks.OperatorRecovered) {
		if k == ns.AnyIndex(tasks.DefaultTenant) {
			t.Fatalf("%s is looked up in the index of unfiltered subscribers", tasks.OperatorRecovered)
		}
	}
	if keys := ns.IndexKeysFor(tasks.DefaultTenant, "video.x"); len(keys) != 3 || keys[1] != ns.AnyIndex(tasks.DefaultTenant) {
		t.Fatalf("an app type's index keys %v: want its type, the unfiltered index and its prefix", keys)
	}
}

func TestSubscriberJSONRoundTrip(t *testing.T) {
	s, err := tasks.Subscriber{ID: "a", URL: "https://a.test", RetryHorizon: tasks.Duration(90 * time.Minute)}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	var back tasks.Subscriber
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.RetryHorizon != s.RetryHorizon || back.Limit != s.Limit || back.Secrets[0] != s.Secrets[0] {
		t.Fatalf("round trip %s → %+v", b, back)
	}
}

// A payload that cannot be read dead-letters (SkipRetry); one of a later
// release is refused as such (tasks.ErrNewerTask), never dead-lettered; one of
// the release before is returned to be adopted; one of the release before
// that (layout 1) cannot be.
func TestDecodeTask(t *testing.T) {
	for _, c := range []struct {
		payload string
		want    error
	}{
		{`{`, asynq.SkipRetry},
		{`{"v":3,"subscriber_id":"a:b","event_id":"e"}`, asynq.SkipRetry},
		{`{"v":3,"subscriber_id":"a","event_id":""}`, asynq.SkipRetry},
		{`{"subscriber_id":"a","event":{"id":"e","type":"t","data":1}}`, asynq.SkipRetry}, // layout 1
		{`{"v":4,"subscriber_id":"a","event_id":"e"}`, asynq.SkipRetry},                   // a batch names event_ids
		{`{"v":4,"subscriber_id":"a","event_ids":[]}`, asynq.SkipRetry},                   // and at least one
		{`{"v":4,"subscriber_id":"a","event_ids":["e","x y"]}`, asynq.SkipRetry},          // each an event id
		{`{"v":4,"subscriber_id":"a","event_id":"e","event_ids":["e"]}`, asynq.SkipRetry}, // not both
		{`{"v":5,"subscriber_id":"a","event_id":"e"}`, tasks.ErrNewerTask},
		{`{"v":99}`, tasks.ErrNewerTask},
		{`{"v":5,"subscriber_id":{"tenant":"a"},"event_id":["e"]}`, tasks.ErrNewerTask}, // a shape this release cannot read
	} {
		if _, _, err := tasks.DecodeTask([]byte(c.payload)); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want it to wrap %v", c.payload, err, c.want)
		}
	}
	task := tasks.NewDeliverTask("s", "e1")
	d, legacy, err := tasks.DecodeTask(task.Payload())
	if err != nil || legacy != nil || d.V != tasks.TaskVersion || d.SubscriberID != "s" || d.EventID != "e1" || d.EventIDs != nil {
		t.Fatalf("DecodeTask(%s) = %+v, %v, %v", task.Payload(), d, legacy, err)
	}
	batch := tasks.NewBatchTask("s", []string{"e1", "e2"})
	d, legacy, err = tasks.DecodeTask(batch.Payload())
	if err != nil || legacy != nil || d.V != tasks.BatchVersion || d.SubscriberID != "s" || d.EventID != "" ||
		strings.Join(d.EventIDs, ",") != "e1,e2" {
		t.Fatalf("DecodeTask(%s) = %+v, %v, %v", batch.Payload(), d, legacy, err)
	}
	if id := tasks.BatchTaskID("s", d.EventIDs, "n1"); id != "s:e1+2+n1" {
		t.Fatalf("BatchTaskID = %q; want s:e1+2+n1 (never a single delivery's TaskID: no event id holds a +)", id)
	}
	v2 := `{"v":2,"subscriber_id":"s","gen":"g1","max_attempts":5,"event":{"id":"e2","type":"t","timestamp":"2026-12-01T09:00:00Z","data":null},` +
		`"payload_ref":true,"enqueued_at":"2026-12-01T09:00:00Z","expires_at":"2026-12-02T09:00:00Z"}`
	d, legacy, err = tasks.DecodeTask([]byte(v2))
	if err != nil || legacy == nil || d.EventID != "e2" || legacy.Gen != "g1" || legacy.MaxAttempts != 5 ||
		!legacy.ExpiresAt.Equal(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("DecodeTask(v2) = %+v, %+v, %v; want it to adopt", d, legacy, err)
	}
}

func FuzzDecodeTask(f *testing.F) {
	f.Add(tasks.NewDeliverTask("s", "e").Payload())
	f.Add([]byte(`{"v":2,"subscriber_id":"s","gen":"g","max_attempts":1,"event":{"id":"e"}}`))
	f.Add([]byte(`{"v":5}`))
	f.Add(tasks.NewBatchTask("s", []string{"e1", "e2"}).Payload())
	f.Fuzz(func(t *testing.T, b []byte) {
		d, _, err := tasks.DecodeTask(b)
		if err != nil {
			if !errors.Is(err, asynq.SkipRetry) && !errors.Is(err, tasks.ErrNewerTask) {
				t.Fatalf("error %v neither dead-letters nor refuses a later release's task", err)
			}
			return
		}
		// What decodes names a delivery record: a stored event id is a new
		// one, or "." or "..", accepted before they were refused.
		ids := []string{d.EventID}
		if d.V == tasks.BatchVersion {
			ids = d.EventIDs
		}
		if tasks.ValidateStoredSubscriberID(d.SubscriberID) != nil || len(ids) == 0 || len(ids) > tasks.MaxBatch {
			t.Fatalf("accepted invalid delivery %+v", d)
		}
		for _, id := range ids {
			if id != "." && id != ".." && tasks.ValidateEventID(id) != nil {
				t.Fatalf("accepted invalid delivery %+v", d)
			}
		}
	})
}

func TestSigningSecretsDropsRetiredAfterGrace(t *testing.T) {
	now := time.Date(2026, 7, 11, 8, 0, 0, 0, time.UTC)
	s := tasks.Subscriber{Secrets: []string{"new"}, Retiring: []tasks.RetiringSecret{
		{Secret: "old", Until: now.Add(time.Minute)},
		{Secret: "older", Until: now},
	}}
	if got := s.SigningSecrets(now); len(got) != 2 || got[0] != "new" || got[1] != "old" {
		t.Fatalf("at now: %v, want [new old]", got)
	}
	if got := s.SigningSecrets(now.Add(time.Minute)); len(got) != 1 || got[0] != "new" {
		t.Fatalf("after grace: %v, want [new]", got)
	}
}

func TestFieldErrorNamesNestedField(t *testing.T) {
	s, _ := tasks.Subscriber{ID: "a", URL: "https://a.test", Limit: limits.Limit{Rate: 1, Burst: 0, Period: time.Second}}.WithDefaults()
	var fe *tasks.FieldError
	err := s.Validate()
	if !errors.As(err, &fe) || fe.Field != "limit.burst" || !errors.Is(err, tasks.ErrInvalid) {
		t.Fatalf("err = %#v, want a tasks.FieldError on limit.burst that is tasks.ErrInvalid", err)
	}
}

// The body a subscriber is sent is the event with its data byte for byte
// as published (whitespace, escapes, U+2028, non-ASCII) and no HTML
// escaping of the strings; parsed back it is the same event.
func TestEventBodyKeepsTheDataAsPublished(t *testing.T) {
	data := "{ \"a\" : \"<&>\",\n  \"u\": \"\u2028 é \\u00e9\" }"
	ev := tasks.Event{ID: "e<1>", Type: "t&x", Timestamp: time.Date(2026, 12, 1, 9, 0, 0, 5, time.UTC), Data: json.RawMessage(data)}
	b := string(tasks.EventBody(ev))
	want := `{"id":"e<1>","type":"t&x","timestamp":"2026-12-01T09:00:00.000000005Z","data":` + data + `}`
	if b != want {
		t.Fatalf("body\n%s\nwant\n%s", b, want)
	}
	var back tasks.Event
	if err := json.Unmarshal([]byte(b), &back); err != nil || back.ID != ev.ID || back.Type != ev.Type || string(back.Data) != data ||
		!back.Timestamp.Equal(ev.Timestamp) {
		t.Fatalf("body parsed back: %+v, %v", back, err)
	}
}

// An event is its type and its data as a JSON value: keys in any order,
// whitespace and number spellings do not make another event; a value
// does.
func TestEventDigestComparesJSONValues(t *testing.T) {
	d := func(typ, data string) string {
		t.Helper()
		s, err := tasks.EventDigest(typ, json.RawMessage(data))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := d("t", `{"a":1,"b":[1.5,"x",null,true],"c":{"d":"é"}}`)
	for _, same := range []string{`{ "c" : {"d":"\u00e9"}, "b":[1.50,"x",null,true],"a":1.0}`, `{"b":[15e-1,"x",null,true],"a":1,"c":{"d":"é"}}`} {
		if d("t", same) != base {
			t.Errorf("%s: another digest than the same event's", same)
		}
	}
	for _, other := range [][2]string{{"u", `{"a":1,"b":[1.5,"x",null,true],"c":{"d":"é"}}`}, {"t", `{"a":2,"b":[1.5,"x",null,true],"c":{"d":"é"}}`},
		{"t", `{"a":1,"b":["x",1.5,null,true],"c":{"d":"é"}}`}, {"t", `{"a":"1","b":[1.5,"x",null,true],"c":{"d":"é"}}`},
		{"t", `{"a":10000000000000000000001,"b":[1.5,"x",null,true],"c":{"d":"é"}}`}} {
		if d(other[0], other[1]) == base {
			t.Errorf("%s %s: the digest of another event", other[0], other[1])
		}
	}
	if d("t", `{"n":10000000000000000000001}`) == d("t", `{"n":10000000000000000000000}`) {
		t.Error("two long numbers rounded into one")
	}
}
