package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// Creating, editing and deleting a subscriber from the console. A form
// becomes the API's SubscriberRequest and goes through saveSubscriber, the
// PUT's own path: the same checks, the same errors (shown beside the form,
// which keeps what was typed). The forms take no secret: a new subscriber
// gets a generated one, shown once on the answer, as a rotation's is; an
// edit keeps the subscriber's secrets and its pause (their own buttons
// change them).

const createPath = "/console/create/subscriber"

// subscriberForm is a form's fields as typed.
type subscriberForm struct {
	ID, URL, EventTypes                    string
	Rate, Burst, Period                    string
	MaxInFlight, MaxAttempts, RetryHorizon string
	Region                                 string
	Metrics                                bool
}

type subscriberFormPage struct {
	base
	New    bool
	F      subscriberForm
	Action string // where the form posts
	Delete string // the delete form's path (edit only)
	Error  *APIError
}

type createdPage struct {
	base
	Sub    Subscriber // no secrets: the generated one is Secret
	Secret string
}

// formOf is the form showing subscriber v.
func formOf(v Subscriber) subscriberForm {
	f := subscriberForm{ID: v.ID, URL: v.URL, EventTypes: strings.Join(v.EventTypes, ", "), Rate: strconv.Itoa(v.RateLimit.Rate),
		Burst: strconv.Itoa(v.RateLimit.Burst), Period: v.RateLimit.Period, RetryHorizon: v.RetryHorizon, Region: v.Region,
		Metrics: v.Metrics}
	if v.MaxInFlight > 0 {
		f.MaxInFlight = strconv.Itoa(v.MaxInFlight)
	}
	if v.MaxAttempts > 0 {
		f.MaxAttempts = strconv.Itoa(v.MaxAttempts)
	}
	return f
}

// readForm reads the posted form; an empty field is the API's absent one.
func readForm(r *http.Request) subscriberForm {
	v := func(k string) string { return strings.TrimSpace(r.PostForm.Get(k)) }
	return subscriberForm{ID: v("id"), URL: v("url"), EventTypes: v("event_types"), Rate: v("rate"), Burst: v("burst"),
		Period: v("period"), MaxInFlight: v("max_in_flight"), MaxAttempts: v("max_attempts"), RetryHorizon: v("retry_horizon"),
		Region: v("region"), Metrics: r.PostForm.Get("metrics") != ""}
}

// request is the API's request the form makes; a number that is not one is
// refused naming the API's field.
func (f subscriberForm) request() (SubscriberRequest, error) {
	req := SubscriberRequest{URL: f.URL, RetryHorizon: f.RetryHorizon, Region: f.Region, Metrics: StrictBool(f.Metrics)}
	req.EventTypes = strings.FieldsFunc(f.EventTypes, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
	num := func(field, v string, dst *int) error {
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return apiErr(http.StatusUnprocessableEntity, "invalid", field, "want a whole number, got %s", quoted(v))
		}
		*dst = n
		return nil
	}
	if f.Rate != "" || f.Burst != "" || f.Period != "" {
		req.RateLimit = &RateLimit{Period: f.Period}
		if err := errors.Join(num("rate_limit.rate", f.Rate, &req.RateLimit.Rate), num("rate_limit.burst", f.Burst, &req.RateLimit.Burst)); err != nil {
			return req, err
		}
	}
	if f.MaxInFlight != "" {
		req.MaxInFlight = new(int)
		if err := num("max_in_flight", f.MaxInFlight, req.MaxInFlight); err != nil {
			return req, err
		}
	}
	return req, num("max_attempts", f.MaxAttempts, &req.MaxAttempts)
}

// formError re-renders the form with err beside it, when err is the
// form's to fix (a field, a conflict); any other error is the error page's.
func (c *console) formError(w http.ResponseWriter, p subscriberFormPage, err error) error {
	ae := toAPIError(err)
	if ae.Status != http.StatusUnprocessableEntity && ae.Status != http.StatusConflict && ae.Status != http.StatusBadRequest {
		return err
	}
	p.Error = ae
	return c.render(w, ae.Status, "subscriber_form.html", p)
}

func (c *console) newSubscriberForm(w http.ResponseWriter, r *http.Request) error {
	return c.render(w, http.StatusOK, "subscriber_form.html", subscriberFormPage{base: c.scoped(r, base{Title: "New subscriber"}), New: true,
		Action: createPath})
}

// createSubscriber creates a subscriber, never replaces one: an id taken
// is refused (409) before the PUT. Two operators creating the same id at
// once both pass that check; the later one's PUT replaces the earlier's.
func (c *console) createSubscriber(w http.ResponseWriter, r *http.Request) error {
	f := readForm(r)
	p := subscriberFormPage{base: c.scoped(r, base{Title: "New subscriber"}), New: true, F: f, Action: createPath}
	req, err := f.request()
	if err != nil {
		return c.formError(w, p, err)
	}
	if err := tasks.ValidateSubscriberID(f.ID); err != nil {
		return c.formError(w, p, err)
	}
	switch _, err := c.prod(r).GetSubscriber(r.Context(), f.ID); {
	case err == nil:
		return c.formError(w, p, apiErr(http.StatusConflict, "exists", "id", "a subscriber %s exists already: edit it from its page", f.ID))
	case !errors.Is(err, producer.ErrUnknownSubscriber):
		return err
	}
	v, _, err := c.s.saveSubscriber(r.Context(), c.prod(r), f.ID, req)
	if err != nil {
		return c.formError(w, p, err)
	}
	secret := ""
	if len(v.Secrets) > 0 {
		secret, v.Secrets = v.Secrets[0], nil
	}
	return c.render(w, http.StatusOK, "created.html", createdPage{base: c.scoped(r, base{Title: "Created " + v.ID}), Sub: v, Secret: secret})
}

func (c *console) editPage(r *http.Request, id string, f subscriberForm) subscriberFormPage {
	return subscriberFormPage{base: c.scoped(r, base{Title: "Edit " + id}), F: f, Action: subscriberPath(id) + "/edit",
		Delete: subscriberPath(id) + "/delete"}
}

func (c *console) editSubscriberForm(w http.ResponseWriter, r *http.Request) error {
	sub, err := c.prod(r).GetSubscriber(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return c.render(w, http.StatusOK, "subscriber_form.html", c.editPage(r, sub.ID, formOf(view(sub))))
}

// editSubscriber replaces the subscriber with the form, as a PUT without
// secrets or paused does; one deleted before the form is sent is not
// created again.
func (c *console) editSubscriber(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	f := readForm(r)
	f.ID = id
	p := c.editPage(r, id, f)
	req, err := f.request()
	if err != nil {
		return c.formError(w, p, err)
	}
	if _, err := c.prod(r).GetSubscriber(r.Context(), id); err != nil {
		return err
	}
	if _, _, err := c.s.saveSubscriber(r.Context(), c.prod(r), id, req); err != nil {
		return c.formError(w, p, err)
	}
	return seeOther(w, r, subscriberPath(id)+"?done=saved")
}

// deleteSubscriber deletes the subscriber, as the API's DELETE does, once
// the form's confirm field repeats its id.
func (c *console) deleteSubscriber(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if r.PostForm.Get("confirm") != id {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "confirm", "type the subscriber's id, %s, to delete it", id)
	}
	if err := c.prod(r).DeleteSubscriber(r.Context(), id); err != nil {
		return err
	}
	return seeOther(w, r, "/console/subscribers?done=deleted")
}
