package web

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// The deliveries of every subscriber on one page. hooklane keeps no index
// of deliveries across subscribers (each subscriber's log is in its own
// slot, and one more write per publish to a shared key is what the delivery
// log was built to avoid), so the page reads subscribers a page at a time,
// in id order: the newest ?per deliveries of each of ?subs subscribers
// (default 10 of 20), merged newest first. Its cost is those reads (a
// subscriber's log range, its records in one pipeline) however many
// subscribers and deliveries there are; it never scans the keyspace. The
// state, type, status and id filters apply to what the page read, so a
// filtered page may be short, or empty, and still have a next page; the
// time range bounds each log's range in Redis.
//
// The dead letters of every subscriber have an index of their own (the
// ledger's, by dead time): the page shows one page of it, filtered the
// same way.

type allDeliveriesPage struct {
	base
	States                  []string
	State, Type, Status, ID string
	Since, Until            string // the form's values
	Subs, Per               int
	From, To                string // the subscribers this page read (ids)
	Read                    int    // deliveries read, before the filters
	Rows                    []tasks.DeliveryRecord
	Next                    string
	Dead                    []tasks.DeadLetter
	DeadRead                int
	NextDead                string
}

// statusFilter matches an attempt's HTTP status: "" any, "none" no
// answer, "5xx" a class, "503" one status.
type statusFilter string

func parseStatusFilter(v string) (statusFilter, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "" || v == "none" {
		return statusFilter(v), nil
	}
	if len(v) == 3 && v[0] >= '1' && v[0] <= '5' && (v[1:] == "xx" || v[1] >= '0' && v[1] <= '9' && v[2] >= '0' && v[2] <= '9') {
		return statusFilter(v), nil
	}
	return "", apiErr(http.StatusUnprocessableEntity, "invalid", "status", "want an HTTP status (503), a class (5xx) or none (no answer)")
}

// matches reports whether the last of attempts has the status.
func (f statusFilter) matches(attempts []tasks.Attempt) bool {
	if f == "" {
		return true
	}
	if len(attempts) == 0 {
		return false
	}
	st := attempts[len(attempts)-1].Status
	switch {
	case f == "none":
		return st == 0
	case f[1:] == "xx":
		return st/100 == int(f[0]-'0')
	}
	return strconv.Itoa(st) == string(f)
}

// typeMatches matches an event type exactly, or by its prefix ("order.*"),
// as subscribers' filters do.
func typeMatches(filter, typ string) bool {
	if p, ok := strings.CutSuffix(filter, "*"); ok {
		return strings.HasPrefix(typ, p)
	}
	return filter == "" || filter == typ
}

// lastStatus is a delivery's last answer's status, for the list (0: none).
func lastStatus(as []tasks.Attempt) int {
	if len(as) == 0 {
		return 0
	}
	return as[len(as)-1].Status
}

// allDeliveries shows the newest deliveries of a page of subscribers and a
// page of dead letters, across subscribers.
func (c *console) allDeliveries(w http.ResponseWriter, r *http.Request) error {
	ctx, q := r.Context(), r.URL.Query()
	p := allDeliveriesPage{base: c.scoped(r, base{Title: "Deliveries"}), States: tasks.States, State: q.Get("state"),
		Type: strings.TrimSpace(q.Get("type")), ID: strings.TrimSpace(q.Get("q")), Since: q.Get("since"), Until: q.Get("until")}
	var err error
	if p.Subs, err = intParam(q, "subs", 20, 1, 100); err != nil {
		return err
	}
	if p.Per, err = intParam(q, "per", 10, 1, 100); err != nil {
		return err
	}
	if p.State != "" && !slices.Contains(tasks.States, p.State) {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "state", "want one of %s", strings.Join(tasks.States, ", "))
	}
	status, err := parseStatusFilter(q.Get("status"))
	if err != nil {
		return err
	}
	p.Status = string(status)
	dq := producer.DeliveryQuery{Limit: p.Per, Attempts: true}
	if dq.Since, err = timeParam(q, "since"); err != nil {
		return err
	}
	if dq.Until, err = timeParam(q, "until"); err != nil {
		return err
	}
	after := q.Get("after")
	if after != "" && tasks.ValidateSubscriberID(after) != nil {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "after", "not a subscriber id")
	}
	match := func(sub, event, typ string, attempts []tasks.Attempt) bool {
		return typeMatches(p.Type, typ) && status.matches(attempts) &&
			(p.ID == "" || strings.HasPrefix(event, p.ID) || strings.HasPrefix(sub+":"+event, p.ID))
	}

	subs, next, err := c.prod(r).Subscribers(ctx, after, p.Subs)
	if err != nil {
		return err
	}
	slices.SortFunc(subs, func(a, b tasks.Subscriber) int { return strings.Compare(a.ID, b.ID) })
	if len(subs) > 0 {
		p.From, p.To = subs[0].ID, subs[len(subs)-1].ID
	}
	pages := make([][]tasks.DeliveryRecord, len(subs))
	errs := make([]error, len(subs))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, s := range subs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			pages[i], _, errs[i] = c.prod(r).Deliveries(ctx, s.ID, dq)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, producer.ErrUnknownSubscriber) { // deleted since it was listed: nothing to show
			return err
		}
		p.Read += len(pages[i])
		for _, d := range pages[i] {
			if (p.State == "" || d.State == p.State) && match(d.SubscriberID, d.EventID, d.EventType, d.Attempts) {
				p.Rows = append(p.Rows, d)
			}
		}
	}
	slices.SortFunc(p.Rows, func(a, b tasks.DeliveryRecord) int {
		return cmp.Or(b.PublishedAt.Compare(a.PublishedAt), strings.Compare(a.SubscriberID, b.SubscriberID),
			strings.Compare(a.EventID, b.EventID))
	})
	p.Refresh = refreshFor(c.now(), p.Rows...)
	keep := func(v url.Values) string {
		for _, k := range []string{"state", "type", "status", "q", "since", "until", "subs", "per"} {
			if q.Get(k) != "" {
				v.Set(k, q.Get(k))
			}
		}
		return "/console/deliveries?" + v.Encode()
	}
	if next != "" {
		p.Next = keep(url.Values{"after": {next}})
	}

	if p.State == "" || p.State == tasks.StateDead {
		dead, nextDead, err := c.prod(r).DeadLetters(ctx, producer.DeadLetterQuery{Since: dq.Since, Until: dq.Until, Limit: 20,
			Cursor: q.Get("dead")})
		if err != nil {
			return err
		}
		p.DeadRead = len(dead)
		for _, e := range dead {
			typ, event := "", e.TaskID
			if e.Event != nil {
				typ, event = e.Event.Type, e.Event.ID
			}
			if match(e.SubscriberID, event, typ, e.Attempts) {
				p.Dead = append(p.Dead, e)
			}
		}
		if nextDead != "" {
			p.NextDead = keep(url.Values{"dead": {nextDead}}) + "#dead-letters"
		}
	}
	return c.render(w, http.StatusOK, "deliveries.html", p)
}
