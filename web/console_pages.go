package web

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// The console's pages read through the producer's exported API and the
// status the API shows (statuses); each reads one page of what it lists,
// so its cost is the page's size, not the number of subscribers, of
// deliveries or of an event's subscribers (TestConsolePageCost).

func subscriberPath(id string) string { return "/console/subscribers/" + url.PathEscape(id) }

func deliveryPath(sub, ev string) string {
	return subscriberPath(sub) + "/deliveries/" + url.PathEscape(ev)
}

func eventPath(id string) string { return "/console/events/" + url.PathEscape(id) }

// flashes are what an action's redirect (?done=) says on the page it
// lands on: a fixed set, so that a link cannot put words on a page.
var flashes = map[string]string{
	"paused":  "Paused: new events are held for it, and so are its queued ones, until it is resumed.",
	"resumed": "Resumed: its held events are on their way.",
	"resent":  "Sent again, with the same webhook-id: a new series of attempts below.",
	// a resend that was booked but not sent (producer.Outcome)
	"resent-scheduled":         "Booked again, with the same webhook-id: scheduled, it goes at its turn at the subscriber's pace.",
	"resent-held-paused":       "Booked again, with the same webhook-id, but held: the subscriber is paused; it goes once it is resumed.",
	"resent-held-breaker_open": "Booked again, with the same webhook-id, but held: the circuit breaker is open; it goes once a probe succeeds.",
	"resent-held-cooling":      "Booked again, with the same webhook-id, but held: the destination cools down; it goes when the cooldown ends.",
	"test":                     "Test event sent: a hooklane.ping to this subscriber alone, signed and delivered like any other.",
	"cooldown-ended":           "Cooldown ended: the deliveries that waited on it go now, at its pace; each such attempt notes that it went early.",
	"not-cooling":              "It was not cooling down: nothing to end.",
	"saved":                    "Saved: its new configuration applies from its next delivery.",
	"deleted":                  "Deleted: its queued events are dropped when they come due, counted, not sent.",
}

// intParam reads query parameter name: def when absent, else lo to hi.
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, apiErr(http.StatusUnprocessableEntity, "invalid", name, "want %d to %d", lo, hi)
	}
	return n, nil
}

// timeParam reads an RFC 3339 time, or a browser's datetime-local value
// (read as UTC, which the form says); zero when absent.
func timeParam(q url.Values, name string) (time.Time, error) {
	v := strings.TrimSpace(q.Get(name))
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, apiErr(http.StatusUnprocessableEntity, "invalid", name, "want a time such as 2026-07-11T08:14 (UTC)")
}

// subscriberStates are the list's state filters.
var subscriberStates = []struct{ Value, Label string }{
	{"", "any"}, {"paused", "paused"}, {"open", "breaker open"}, {"cooling", "cooling down"},
}

func matchesState(st Status, state string) bool {
	switch state {
	case "paused":
		return st.Paused
	case "open":
		return st.Breaker.State != "closed"
	case "cooling":
		return st.CoolingUntil != nil
	}
	return true
}

type subscribersPage struct {
	base
	Query, State string
	States       []struct{ Value, Label string }
	Limit        int
	Rows         []subscriberRow
	Read         int    // subscribers read for this page, before the state filter
	Next         string // the next page's URL
}

type subscriberRow struct {
	Sub    Subscriber
	Status Status
}

// subscribers lists a page of subscribers in id order with their status.
// A state filter applies to the page read, so a filtered page may come back
// short, as the API's do: its cost is its size whatever the filter skips.
func (c *console) subscribers(w http.ResponseWriter, r *http.Request) error {
	ctx, q := r.Context(), r.URL.Query()
	limit, err := intParam(q, "limit", 50, 1, 500)
	if err != nil {
		return err
	}
	p := subscribersPage{base: c.scoped(r, base{Title: "Subscribers", Flash: flashes[q.Get("done")]}), Query: strings.TrimSpace(q.Get("q")), State: q.Get("state"),
		States: subscriberStates, Limit: limit}
	if !slices.ContainsFunc(subscriberStates, func(s struct{ Value, Label string }) bool { return s.Value == p.State }) {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "state", "want paused, open or cooling")
	}
	after := q.Get("after")
	for name, v := range map[string]string{"after": after, "q": p.Query} {
		if v != "" && tasks.ValidateSubscriberID(v) != nil {
			return apiErr(http.StatusUnprocessableEntity, "invalid", name, "not a subscriber id: 1-64 characters of A-Z a-z 0-9 . _ -")
		}
	}
	var subs []tasks.Subscriber
	if p.Query != "" && after == "" {
		// The search's first page: the id itself, then those it prefixes.
		switch s, err := c.prod(r).GetSubscriber(ctx, p.Query); {
		case err == nil:
			subs = append(subs, s)
		case !errors.Is(err, producer.ErrUnknownSubscriber):
			return err
		}
		after = p.Query
	}
	var page []tasks.Subscriber
	next := after // a page of one that the exact match filled
	if n := limit - len(subs); n > 0 {
		if page, next, err = c.prod(r).Subscribers(ctx, after, n); err != nil {
			return err
		}
	}
	slices.SortFunc(page, func(a, b tasks.Subscriber) int { return strings.Compare(a.ID, b.ID) })
	if p.Query != "" {
		// In id order, those with the prefix come first: the rest end the search.
		if i := slices.IndexFunc(page, func(s tasks.Subscriber) bool { return !strings.HasPrefix(s.ID, p.Query) }); i >= 0 {
			page, next = page[:i], ""
		}
	}
	subs = append(subs, page...)
	sts, err := c.s.statuses(ctx, c.prod(r), subs)
	if err != nil {
		return err
	}
	p.Read = len(subs)
	for i, sub := range subs {
		if matchesState(sts[i], p.State) {
			p.Rows = append(p.Rows, subscriberRow{Sub: view(sub), Status: sts[i]})
		}
	}
	if next != "" {
		v := url.Values{"after": {next}}
		for _, k := range []string{"q", "state", "limit"} {
			if q.Get(k) != "" {
				v.Set(k, q.Get(k))
			}
		}
		p.Next = "/console/subscribers?" + v.Encode()
	}
	return c.render(w, http.StatusOK, "subscribers.html", p)
}

// subscriberActions are the paths the subscriber page's forms post to.
type subscriberActions struct{ Pause, Resume, Test, Rotate, Replay, EndCooldown string }

type subscriberPage struct {
	base
	Sub      Subscriber // as the API shows it: no secrets
	Secrets  int        // how many sign every request
	Retiring []time.Time
	Status   Status
	Actions  subscriberActions
	Chart    outcomeChart

	States         []string
	State          string
	Since, Until   string // the filter form's values
	Limit          int
	Deliveries     []tasks.DeliveryRecord
	NextDeliveries string

	DeadLetters []tasks.DeadLetter
	NextDead    string
}

// subscriber shows one subscriber: configuration, status, the chart, a
// page of its deliveries (?state, ?since, ?until, ?cursor, ?limit) and one
// of its dead letters (?dead).
func (c *console) subscriber(w http.ResponseWriter, r *http.Request) error {
	ctx, q, id := r.Context(), r.URL.Query(), r.PathValue("id")
	limit, err := intParam(q, "limit", 20, 1, 200)
	if err != nil {
		return err
	}
	chartN, err := intParam(q, "chart", chartDefaultN, 1, chartMaxN)
	if err != nil {
		return err
	}
	dq := producer.DeliveryQuery{State: q.Get("state"), Limit: limit, Cursor: q.Get("cursor")}
	if dq.Since, err = timeParam(q, "since"); err != nil {
		return err
	}
	if dq.Until, err = timeParam(q, "until"); err != nil {
		return err
	}
	sub, err := c.prod(r).GetSubscriber(ctx, id)
	if err != nil {
		return err
	}
	sts, err := c.s.statuses(ctx, c.prod(r), []tasks.Subscriber{sub})
	if err != nil {
		return err
	}
	self := subscriberPath(sub.ID)
	p := subscriberPage{base: c.scoped(r, base{Title: sub.ID, Flash: flashes[q.Get("done")]}), Sub: view(sub), Secrets: len(sub.Secrets),
		Status: sts[0], States: tasks.States, State: dq.State, Since: q.Get("since"), Until: q.Get("until"), Limit: limit,
		Actions: subscriberActions{Pause: self + "/pause", Resume: self + "/resume", Test: self + "/test",
			Rotate: self + "/rotate", Replay: self + "/replay", EndCooldown: self + "/cooldown/end"}}
	p.Retiring = p.Sub.RetiringUntil
	if p.Chart, err = c.readChart(ctx, c.prod(r), sub.ID, chartN, q.Get("span") == "deliveries"); err != nil {
		return err
	}
	var next string
	if p.Deliveries, next, err = c.prod(r).Deliveries(ctx, sub.ID, dq); err != nil {
		return err
	}
	p.Refresh = refreshFor(c.now(), p.Deliveries...)
	if next != "" {
		v := url.Values{"cursor": {next}}
		for _, k := range []string{"state", "since", "until", "limit", "chart", "span"} {
			if q.Get(k) != "" {
				v.Set(k, q.Get(k))
			}
		}
		p.NextDeliveries = self + "?" + v.Encode() + "#deliveries"
	}
	if p.DeadLetters, next, err = c.prod(r).DeadLetters(ctx, producer.DeadLetterQuery{Subscriber: sub.ID, Limit: 10,
		Cursor: q.Get("dead")}); err != nil {
		return err
	}
	if next != "" {
		p.NextDead = self + "?" + url.Values{"dead": {next}}.Encode() + "#dead-letters"
	}
	return c.render(w, http.StatusOK, "subscriber.html", p)
}

type deliveryPage struct {
	base
	D           tasks.DeliveryRecord
	Attempts    []attemptView
	Event       *tasks.Event // nil once past the payload retention
	Payload     string       // the body sent, secrets redacted (redactSent)
	PublishedAt time.Time
	Resend      string // the resend form's path
	Active      bool   // under way: a resend would be refused
}

// delivery shows one delivery's attempts as a timeline, and the event's
// payload while it is kept.
func (c *console) delivery(w http.ResponseWriter, r *http.Request) error {
	ctx, sub, evID := r.Context(), r.PathValue("id"), r.PathValue("event_id")
	d, err := c.prod(r).GetDelivery(ctx, sub, evID)
	if err != nil {
		return err
	}
	p := deliveryPage{base: c.scoped(r, base{Title: evID + " → " + sub, Flash: flashes[r.URL.Query().Get("done")]}), D: d,
		Resend: deliveryPath(sub, evID) + "/resend",
		Active: d.State != tasks.StateDelivered && d.State != tasks.StateDead}
	p.Refresh = refreshFor(c.now(), d)
	p.Attempts = attemptViews(d.Attempts)
	se, ok, err := c.storedEvent(ctx, c.prod(r), evID)
	if err != nil {
		return err
	}
	if ok {
		p.Event, p.Payload, p.PublishedAt = &se.Event, redactSent(se.Body), se.PublishedAt
	}
	return c.render(w, http.StatusOK, "delivery.html", p)
}

type eventPage struct {
	base
	Event       tasks.Event
	Payload     string
	PublishedAt time.Time
	Fanout      int
	Rows        []deliveryOf
	Next        string
}

// event shows an event and, a page at a time (?after, ?limit), the
// delivery to each subscriber it went to.
func (c *console) event(w http.ResponseWriter, r *http.Request) error {
	ctx, q, id := r.Context(), r.URL.Query(), r.PathValue("id")
	limit, err := intParam(q, "limit", 50, 1, 500)
	if err != nil {
		return err
	}
	se, ok, err := c.storedEvent(ctx, c.prod(r), id)
	ev, subs, published := se.Event, se.Subscribers, se.PublishedAt
	if err != nil {
		return err
	}
	if !ok {
		return apiErr(http.StatusNotFound, "unknown_event", "",
			"no event %s: never published, or past the payload retention (its deliveries may still be found as <subscriber>:%s)", id, id)
	}
	p := eventPage{base: c.scoped(r, base{Title: "Event " + id}), Event: ev, Payload: Redact(ev.Data), PublishedAt: published, Fanout: len(subs)}
	after := q.Get("after")
	start, _ := slices.BinarySearch(subs, after)
	if start < len(subs) && subs[start] == after {
		start++
	}
	page := subs[start:min(len(subs), start+limit)]
	ids := make([]string, len(page))
	for i := range ids {
		ids[i] = id
	}
	if p.Rows, err = c.readDeliveries(ctx, c.prod(r), page, ids); err != nil {
		return err
	}
	var shown []tasks.DeliveryRecord
	for _, r := range p.Rows {
		if r.Record != nil {
			shown = append(shown, *r.Record)
		}
	}
	p.Refresh = refreshFor(c.now(), shown...)
	if start+limit < len(subs) {
		v := url.Values{"after": {page[len(page)-1]}}
		if q.Get("limit") != "" {
			v.Set("limit", q.Get("limit"))
		}
		p.Next = eventPath(id) + "?" + v.Encode()
	}
	return c.render(w, http.StatusOK, "event.html", p)
}

type searchPage struct {
	base
	Query string
}

// search finds an event, a delivery ("<subscriber>:<event>", as task ids
// and dead letters name it) or a subscriber by its id, and goes to its page.
func (c *console) search(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	p := searchPage{base: c.scoped(r, base{Title: "Find", Search: q}), Query: q}
	if q == "" {
		return c.render(w, http.StatusOK, "search.html", p)
	}
	if _, ok, err := c.storedEvent(ctx, c.prod(r), q); err != nil {
		return err
	} else if ok {
		return seeOther(w, r, eventPath(q))
	}
	if sub, ev, ok := tasks.SplitTaskID(q); ok {
		switch _, err := c.prod(r).GetDelivery(ctx, sub, ev); {
		case err == nil:
			return seeOther(w, r, deliveryPath(sub, ev))
		case errors.Is(err, producer.ErrRedisUnavailable):
			return err
		}
	}
	if tasks.ValidateSubscriberID(q) == nil {
		switch _, err := c.prod(r).GetSubscriber(ctx, q); {
		case err == nil:
			return seeOther(w, r, subscriberPath(q))
		case errors.Is(err, producer.ErrRedisUnavailable):
			return err
		}
	}
	return c.render(w, http.StatusNotFound, "search.html", p)
}
