package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// After a rotation the old secret signs beside the new one until its grace
// ends; a retiring secret past its grace no longer signs.
func TestRetiringSecretSignsUntilGraceEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	expired, _ := tasks.NewSecret()
	old := b.put(t, tasks.Subscriber{ID: "s", URL: s.URL}).Secrets[0]
	sub, _, err := b.p.RotateSecret(ctx, "s", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sub.Retiring = append(sub.Retiring, tasks.RetiringSecret{Secret: expired, Until: time.Now().Add(time.Second)})
	b.put(t, sub)
	time.Sleep(time.Until(sub.Retiring[1].Until)) // let its grace end: the point of the test, not a wait for a result
	if _, err := b.p.Publish(ctx, tasks.Event{ID: "e1", Type: "t", Data: json.RawMessage(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "delivery", func() bool { return s.Count() == 1 })
	a := s.Got()[0]
	if n := len(strings.Fields(a.Header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("%d signatures, want 2 (new and old)", n)
	}
	for name, sec := range map[string]string{"new": sub.Secrets[0], "old": old} {
		wh, _ := standardwebhooks.NewWebhook(sec)
		if err := wh.Verify(a.Body, a.Header); err != nil {
			t.Errorf("%s secret does not verify: %v", name, err)
		}
	}
	wh, _ := standardwebhooks.NewWebhook(expired)
	if wh.Verify(a.Body, a.Header) == nil {
		t.Error("a secret past its grace still signs")
	}
}
