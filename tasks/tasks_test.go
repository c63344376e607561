package tasks

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/limits"
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
		{nil, OperatorFailing, false},
		{[]string{"hooklane.*"}, OperatorFailing, true},
		{[]string{OperatorDead}, OperatorDead, true},
		{[]string{OperatorDead}, OperatorFailing, false},
	}
	for _, tt := range tests {
		s := Subscriber{EventTypes: tt.filter}
		if got := s.Matches(tt.typ); got != tt.want {
			t.Errorf("filter %v, type %q: %v, want %v", tt.filter, tt.typ, got, tt.want)
		}
	}
}

func TestOperatorTypesAreNotLookedUpInTheUnfilteredIndex(t *testing.T) {
	ns := Keys("n")
	for _, k := range ns.IndexKeysFor(OperatorRecovered) {
		if k == ns.AnyIndex() {
			t.Fatalf("%s is looked up in the index of unfiltered subscribers", OperatorRecovered)
		}
	}
	if keys := ns.IndexKeysFor("video.x"); len(keys) != 3 || keys[1] != ns.AnyIndex() {
		t.Fatalf("an app type's index keys %v: want its type, the unfiltered index and its prefix", keys)
	}
}

func TestSubscriberJSONRoundTrip(t *testing.T) {
	s, err := Subscriber{ID: "a", URL: "https://a.test", RetryHorizon: Duration(90 * time.Minute)}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	var back Subscriber
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.RetryHorizon != s.RetryHorizon || back.Limit != s.Limit || back.Secrets[0] != s.Secrets[0] {
		t.Fatalf("round trip %s → %+v", b, back)
	}
}

func TestDecodeDeliverySkipsRetry(t *testing.T) {
	for _, payload := range []string{`{`, `{"subscriber_id":"a:b","event":{"id":"e","type":"t","data":1}}`, `{"subscriber_id":"a","event":{"id":"","type":"t","data":1}}`} {
		if _, err := DecodeDelivery([]byte(payload)); !errors.Is(err, asynq.SkipRetry) {
			t.Errorf("%s: err %v, want it to wrap asynq.SkipRetry", payload, err)
		}
	}
}

func FuzzDecodeDelivery(f *testing.F) {
	good, _ := json.Marshal(Delivery{SubscriberID: "s", Event: Event{ID: "e", Type: "t", Data: json.RawMessage(`{}`)}})
	f.Add(good)
	f.Add([]byte(`{"event":{"data":null}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDelivery(b)
		if err != nil {
			if !errors.Is(err, asynq.SkipRetry) {
				t.Fatalf("error %v does not dead-letter", err)
			}
			return
		}
		// What decodes is deliverable: valid ids and JSON data.
		if ValidateSubscriberID(d.SubscriberID) != nil || d.Event.Validate() != nil {
			t.Fatalf("accepted invalid delivery %+v", d)
		}
	})
}

func TestSigningSecretsDropsRetiredAfterGrace(t *testing.T) {
	now := time.Date(2026, 7, 11, 8, 0, 0, 0, time.UTC)
	s := Subscriber{Secrets: []string{"new"}, Retiring: []RetiringSecret{
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
	s, _ := Subscriber{ID: "a", URL: "https://a.test", Limit: limits.Limit{Rate: 1, Burst: 0, Period: time.Second}}.WithDefaults()
	var fe *FieldError
	err := s.Validate()
	if !errors.As(err, &fe) || fe.Field != "limit.burst" || !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %#v, want a FieldError on limit.burst that is ErrInvalid", err)
	}
}

// The stored event's JSON is taken as is when it is the event asked for,
// and refused when it is another's (an id that only starts the same) or
// not an event's value at all.
func TestStoredEventBody(t *testing.T) {
	ev := Event{ID: "e1", Type: "t", Timestamp: time.Date(2026, 12, 1, 9, 0, 0, 5, time.UTC), Data: json.RawMessage(`{"n":[1,2]}`)}
	b, _ := json.Marshal(ev) // as the producer stores it
	v := "1764579600000 s1 s2\n" + string(b)
	got, ok := StoredEventBody(v, "e1")
	if !ok || string(got) != string(b) {
		t.Fatalf("StoredEventBody = %q, %v; want the stored JSON %q", got, ok, b)
	}
	if back, _, _, ok := ParseStoredEvent(v); !ok || string(back.Data) != string(ev.Data) || !back.Timestamp.Equal(ev.Timestamp) {
		t.Fatalf("the body sent is not the event parsed: %+v", back)
	}
	for _, c := range []struct{ v, id string }{
		{v, "e"}, {v, "e10"}, {v, "E1"}, {string(b), "e1"}, {"1 s\n", "e1"}, {"1 s\n" + string(b[:20]), "e1"},
	} {
		if got, ok := StoredEventBody(c.v, c.id); ok {
			t.Errorf("StoredEventBody(%q, %q) = %q: taken", c.v, c.id, got)
		}
	}
}
