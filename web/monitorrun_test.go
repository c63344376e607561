package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/worker"
)

// asynqmon's Archived tab cuts each task id at its first '-' (its UI's
// uuidPrefix): every dead letter of a subscriber "demo-…" reads "demo".
// The rows are told apart by the payload it shows beside the id: the
// delivery's subscriber_id and event_id; max_retry is the attempt budget.
// Its Run button (with HOOKLANE_MONITOR_WRITES) replays the dead letter
// through hooklane: sent once, then listed by neither the archive nor the
// ledger.
func TestAsynqmonArchivedRowsAndRun(t *testing.T) {
	b := setupWith(t, &worker.Config{}, func(c *web.Config) { c.MonitorWrites = true })
	ctx := context.Background()
	var healthy atomic.Bool
	fail := func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}
	down, slow := testkit.NewSink(t, fail), testkit.NewSink(t, fail)
	b.call(t, "PUT", "/v1/subscribers/demo-down", map[string]any{"url": down.URL, "max_attempts": 1})
	b.call(t, "PUT", "/v1/subscribers/demo-slow", map[string]any{"url": slow.URL, "max_attempts": 1})
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1}`)
	q := tasks.Keys(b.ns).DeliveryQueue("", "demo-down", tasks.LaneFresh, 1)
	if q != tasks.Keys(b.ns).DeliveryQueue("", "demo-slow", tasks.LaneFresh, 1) {
		t.Fatal("the two subscribers' tasks are in different queues: the test wants them in one Archived tab")
	}
	type row struct {
		ID       string `json:"id"`
		Payload  string `json:"payload"`
		MaxRetry int    `json:"max_retry"`
	}
	var rows []row
	testkit.Eventually(t, 10*time.Second, "both dead letters in asynqmon's Archived tab", func() bool {
		r := b.call(t, "GET", "/monitoring/api/queues/"+q+"/archived_tasks", nil)
		var page struct {
			Tasks []row `json:"tasks"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &page) != nil {
			return false
		}
		rows = page.Tasks
		return len(rows) == 2
	})
	for _, r := range rows {
		sub, ev, _ := tasks.SplitTaskID(r.ID)
		if !strings.Contains(r.Payload, `"subscriber_id": "`+sub+`"`) || !strings.Contains(r.Payload, `"event_id": "`+ev+`"`) {
			t.Errorf("row %s shows payload %s; want its subscriber_id and event_id", r.ID, r.Payload)
		}
		if r.MaxRetry != 1 {
			t.Errorf("row %s shows max_retry %d; want the attempt budget, 1", r.ID, r.MaxRetry)
		}
	}
	if rows[0].Payload == rows[1].Payload {
		t.Fatalf("both rows show the payload %s", rows[0].Payload)
	}

	healthy.Store(true)
	if r := b.call(t, "POST", "/monitoring/api/queues/"+q+"/archived_tasks/demo-down:e1:run", nil); r.status != http.StatusNoContent {
		t.Fatalf("Run: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, 10*time.Second, "the dead letter run from asynqmon delivered", func() bool {
		rec, err := b.p.GetDelivery(ctx, "demo-down", "e1")
		return err == nil && rec.State == tasks.StateDelivered
	})
	if n := down.Count(); n != 2 {
		t.Fatalf("demo-down got %d requests; want 2 (the dead one, the run)", n)
	}
	dl, _, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{})
	if err != nil || len(dl) != 1 || dl[0].TaskID != "demo-slow:e1" {
		t.Fatalf("ledger lists %+v (%v); want demo-slow:e1 alone", dl, err)
	}
	testkit.Eventually(t, 5*time.Second, "the archive holding demo-slow:e1 alone", func() bool {
		r := b.call(t, "GET", "/monitoring/api/queues/"+q+"/archived_tasks", nil)
		var page struct {
			Tasks []row `json:"tasks"`
		}
		return json.Unmarshal(r.body, &page) == nil && len(page.Tasks) == 1 && page.Tasks[0].ID == "demo-slow:e1"
	})
}
