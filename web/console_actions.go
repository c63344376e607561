package web

import (
	"errors"
	"net/http"
	"time"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// The console's actions: POSTs that checkForm let through (same origin,
// the form's token). Each does what the API's endpoint of the same name
// does, through the same producer call, then redirects to the page that
// shows the result (so a reload does not repeat it), except rotate and
// replay, whose answer is a page of its own: the new secret, shown once,
// and the outcome of each dead letter.

func (c *console) setPaused(paused bool) pageHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		if err := c.prod(r).SetPaused(r.Context(), id, paused); err != nil {
			return err
		}
		done := "resumed"
		if paused {
			done = "paused"
		}
		return seeOther(w, r, subscriberPath(id)+"?done="+done)
	}
}

// sendTest sends a hooklane.ping, within the token's publish rate as the
// API's, and shows its delivery.
func (c *console) sendTest(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := c.s.ingest.allow(r.Context(), r); err != nil {
		return err
	}
	res, err := c.s.sendPing(r.Context(), c.prod(r), id)
	if err != nil {
		return err
	}
	return seeOther(w, r, deliveryPath(id, res.EventID)+"?done=test")
}

// endCooldown ends the destination's cooldown, as the API's
// POST /v1/subscribers/{id}/cooldown/end does.
func (c *console) endCooldown(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	ended, err := c.prod(r).EndCooldown(r.Context(), id)
	if err != nil {
		return err
	}
	done := "cooldown-ended"
	if !ended {
		done = "not-cooling"
	}
	return seeOther(w, r, subscriberPath(id)+"?done="+done)
}

func (c *console) resend(w http.ResponseWriter, r *http.Request) error {
	sub, ev := r.PathValue("id"), r.PathValue("event_id")
	if err := c.s.ingest.allow(r.Context(), r); err != nil {
		return err
	}
	t, err := c.prod(r).Resend(r.Context(), sub, ev)
	if err != nil {
		return err
	}
	// The page says what the resend did: sent, or booked and waiting.
	done := "resent"
	switch t.Outcome {
	case producer.Scheduled:
		done = "resent-scheduled"
	case producer.Held:
		done = "resent-held-" + t.HeldReason
	}
	return seeOther(w, r, deliveryPath(sub, ev)+"?done="+done)
}

type rotatedPage struct {
	base
	Sub    Subscriber // no secrets: the new one is Secret
	Secret string
	Grace  time.Duration
}

// rotate gives the subscriber a new secret and answers it on this page
// only: never in a URL (no redirect), never in a cache (no-store, as every
// console page), never again (the subscriber page shows only a count).
func (c *console) rotate(w http.ResponseWriter, r *http.Request) error {
	grace := DefaultGrace
	if v := r.PostForm.Get("grace"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return apiErr(http.StatusUnprocessableEntity, "invalid", "grace", "want a duration such as 24h, or 0s to stop the old secrets now")
		}
		grace = d
	}
	sub, secret, err := c.prod(r).RotateSecret(r.Context(), r.PathValue("id"), grace)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return c.render(w, http.StatusOK, "rotated.html", rotatedPage{base: c.scoped(r, base{Title: "New secret for " + sub.ID}),
		Sub: view(sub), Secret: secret, Grace: grace})
}

// replayBatch is how many dead letters one press of the button replays;
// the answer offers the next batch.
const replayBatch = 100

type replayedPage struct {
	base
	SubscriberID string
	Outcomes     []replayedView
	Next         string // the cursor of the next batch
	Action       string
}

type replayedView struct {
	producer.ReplayOutcome
	EventID string
}

// replay re-enqueues the subscriber's dead letters (a batch of them, or the
// one named by task_id) and shows what happened to each.
func (c *console) replay(w http.ResponseWriter, r *http.Request) error {
	ctx, id := r.Context(), r.PathValue("id")
	if _, err := c.prod(r).GetSubscriber(ctx, id); err != nil {
		return err
	}
	q := producer.DeadLetterQuery{Subscriber: id, Limit: replayBatch, Cursor: r.PostForm.Get("cursor")}
	if one := r.PostForm.Get("task_id"); one != "" {
		q.IDs, q.Cursor = []string{one}, ""
	}
	out, next, err := c.prod(r).Replay(ctx, q)
	if err != nil && len(out) == 0 && (errors.Is(err, producer.ErrRedisUnavailable) || errors.Is(err, producer.ErrBadCursor)) {
		return err
	}
	// Other errors are the entries that failed, each in its outcome.
	p := replayedPage{base: c.scoped(r, base{Title: "Replayed dead letters of " + id}), SubscriberID: id, Next: next,
		Action: subscriberPath(id) + "/replay"}
	for _, o := range out {
		_, ev, _ := tasks.SplitTaskID(o.TaskID)
		p.Outcomes = append(p.Outcomes, replayedView{ReplayOutcome: o, EventID: ev})
	}
	return c.render(w, http.StatusOK, "replayed.html", p)
}
