package tasks_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/tasks"
)

// "." and ".." are refused as new subscriber and event ids, with a message
// that says why: URL path cleaning changes them, so the API could not
// address what they name. Ids that merely hold dots are still ids. What
// was stored under "." or ".." before stays readable and deletable: its
// dead letters keep their keys, and its queued tasks are still delivered.
func TestDotSegmentIDsAreRefused(t *testing.T) {
	for _, id := range []string{".", ".."} {
		var fe *tasks.FieldError
		err := tasks.ValidateSubscriberID(id)
		if !errors.As(err, &fe) || fe.Field != "subscriber_id" || !strings.Contains(fe.Msg, "path cleaning") {
			t.Errorf("ValidateSubscriberID(%q) = %v; want a subscriber_id error about path cleaning", id, err)
		}
		err = tasks.ValidateEventID(id)
		if !errors.As(err, &fe) || fe.Field != "id" || !strings.Contains(fe.Msg, "path cleaning") {
			t.Errorf("ValidateEventID(%q) = %v; want an id error about path cleaning", id, err)
		}
		ev := tasks.Event{ID: id, Type: "t", Data: json.RawMessage("null")}
		if err := ev.Validate(); !errors.Is(err, tasks.ErrInvalid) {
			t.Errorf("event id %q: Validate() = %v; want it refused", id, err)
		}
		sub, err := tasks.Subscriber{ID: id, URL: "https://a.test/h"}.WithDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Validate(); !errors.As(err, &fe) || fe.Field != "subscriber_id" {
			t.Errorf("subscriber id %q: Validate() = %v; want it refused", id, err)
		}

		// Stored before: still a subscriber id to read or delete by.
		if err := tasks.ValidateStoredSubscriberID(id); err != nil {
			t.Errorf("ValidateStoredSubscriberID(%q) = %v; want it accepted", id, err)
		}
		if s, e, ok := tasks.SplitTaskID(tasks.TaskID(id, "e1")); !ok || s != id || e != "e1" {
			t.Errorf("SplitTaskID(%q) = %q, %q, %v", tasks.TaskID(id, "e1"), s, e, ok)
		}
		if lk := tasks.Keys("n").Ledger(tasks.TaskID(id, "e1")); lk.Index != tasks.Keys("n").DeadIndex(id) {
			t.Errorf("the dead letter %s moved out of its subscriber's keys: %+v", tasks.TaskID(id, "e1"), lk)
		}
		payload := tasks.NewDeliverTask(id, id).Payload()
		if d, _, err := tasks.DecodeTask(payload); err != nil || d.SubscriberID != id || d.EventID != id {
			t.Errorf("a task queued for %q: %+v, %v; want it delivered", id, d, err)
		}
	}
	for _, id := range []string{"...", ".a", "a.", "a..b", "._", ".-."} {
		if err := tasks.ValidateSubscriberID(id); err != nil {
			t.Errorf("ValidateSubscriberID(%q) = %v; want it accepted", id, err)
		}
		if err := tasks.ValidateEventID(id + "~"); err != nil {
			t.Errorf("ValidateEventID(%q) = %v; want it accepted", id+"~", err)
		}
	}
}
