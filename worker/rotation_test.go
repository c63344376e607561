package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// A secret rotated out with grace 0 (a leaked secret) stops signing at
// once in every worker, also in those that read the subscriber less than a
// second before (their cached copy is older than the version Admit
// answers, so they read it again before the request).
func TestGraceZeroRotationStopsTheOldSecretAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	w2, stop2 := startWorker(t, b.rdb, b.ns, worker.Config{})
	t.Cleanup(stop2)
	s := testkit.NewSink(t, nil)
	old := b.put(t, tasks.Subscriber{ID: "s", URL: s.URL}).Secrets[0]
	// Both workers deliver, and so cache the subscriber, just before.
	for i := 0; b.w.Stats().Delivered.Load() == 0 || w2.Stats().Delivered.Load() == 0; i++ {
		if i == 200 {
			t.Fatal("one of the two workers delivered nothing of 200 events")
		}
		n := s.Count()
		b.publish(t, fmt.Sprintf("warm%d", i), "t")
		testkit.Eventually(t, 5*time.Second, "a warm-up delivery", func() bool { return s.Count() > n })
	}
	warm := s.Count()
	sub, _, err := b.p.RotateSecret(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 10*time.Second, "the 20 after the rotation", func() bool { return s.Count() == warm+20 })
	oldWH, _ := standardwebhooks.NewWebhook(old)
	newWH, _ := standardwebhooks.NewWebhook(sub.Secrets[0])
	for _, a := range s.Got()[warm:] {
		if n := len(strings.Fields(a.Header.Get("webhook-signature"))); n != 1 {
			t.Errorf("%s: %d signatures after a grace-0 rotation; want 1 (the new secret's)", a.ID, n)
		}
		if oldWH.Verify(a.Body, a.Header) == nil {
			t.Errorf("%s signed with the secret rotated out", a.ID)
		}
		if err := newWH.Verify(a.Body, a.Header); err != nil {
			t.Errorf("%s: the new secret does not verify: %v", a.ID, err)
		}
	}
}
