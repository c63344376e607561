package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// POST /v1/events/batch publishes up to producer.MaxBatch (100) events in
// one call and answers each on its own, in request order, with exactly
// what POST /v1/events would have answered for it alone: its status and
// its body (the targets' outcomes, or the error with the targets tried).
// The rules:
//
//   - The body must be one JSON object {"events": [...]} of 1 to 100
//     entries, at most 4 × MaxBodyBytes (4 MiB by default): else the call
//     is refused whole (400, 413 or 422) and nothing is written.
//   - Each entry is read as POST /v1/events reads its body (the same
//     decoder): an entry that is not a valid event (a wrong type, an unknown
//     field, an invalid id, data over 256 KiB, an id published before with
//     other content, an unknown subscriber_id) gets that event's error in
//     its place, writes nothing, and does not stop the others. This is what
//     a webhook API's bulk call does (Svix- and Convoy-style per-item
//     results): one bad event does not cost the rest a round trip.
//   - The call's status is 202 when any event queued something new, else
//     200; "failed" counts the events answered with an error.
//   - A batch of N counts N events against the token's ingest rate, all or
//     nothing: past it the call is a 429 with Retry-After and writes
//     nothing (send the same batch again then: it is idempotent, every
//     event already booked answers duplicate). A batch larger than the
//     ingest burst could never pass and is a 422.

// BatchRequest is the body of POST /v1/events/batch: each entry as the
// body of POST /v1/events.
type BatchRequest struct {
	Events []json.RawMessage `json:"events"`
}

// BatchAnswer is the answer of POST /v1/events/batch.
type BatchAnswer struct {
	Results []BatchItem `json:"results"`
	Failed  int         `json:"failed"` // how many results are errors
}

// BatchItem is one event's answer in a batch: the status and body POST
// /v1/events would have answered.
type BatchItem struct {
	Status  int               `json:"status"`
	EventID string            `json:"event_id,omitempty"`
	Targets []producer.Target `json:"targets,omitzero"` // [] when none matched, absent in an error tried on no target
	Note    string            `json:"note,omitempty"`
	Error   *APIError         `json:"error,omitempty"`
}

func (s *Server) publishBatch(w http.ResponseWriter, r *http.Request) error {
	var req BatchRequest
	if err := decode(w, r, 4*s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if len(req.Events) == 0 || len(req.Events) > producer.MaxBatch {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "events", "want 1 to %d events, got %d", producer.MaxBatch, len(req.Events))
	}
	leave, err := s.places.take()
	if err != nil {
		return err
	}
	defer leave()
	if err := s.ingest.allowN(r.Context(), r, len(req.Events)); err != nil {
		return err
	}
	items := make([]BatchItem, len(req.Events))
	var evs []producer.BatchEvent
	var at []int
	for i, raw := range req.Events {
		ev, err := s.batchEvent(r, raw)
		if err != nil {
			items[i] = s.batchItem(nil, err)
			continue
		}
		evs, at = append(evs, ev), append(at, i)
	}
	results, err := s.prod(r).PublishEach(r.Context(), evs)
	if err != nil {
		return err
	}
	for k, res := range results {
		items[at[k]] = s.batchItem(res.Result, res.Err)
	}
	ans := BatchAnswer{Results: items}
	status := http.StatusOK
	for _, it := range items {
		if it.Status == http.StatusAccepted {
			status = http.StatusAccepted
		}
		if it.Error != nil {
			ans.Failed++
		}
	}
	writeJSON(w, status, ans)
	return nil
}

// batchEvent reads one entry of a batch as publish reads its body: through
// decode itself, so that the two cannot drift.
func (s *Server) batchEvent(r *http.Request, raw json.RawMessage) (producer.BatchEvent, error) {
	one := r.Clone(r.Context())
	one.Body, one.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
	var req EventRequest
	if err := decode(discard{}, one, s.cfg.MaxBodyBytes, &req); err != nil {
		return producer.BatchEvent{}, err
	}
	return req.batchEvent()
}

// batchEvent is the event req asks to publish, with its options, and the
// subscriber it names.
func (req EventRequest) batchEvent() (producer.BatchEvent, error) {
	ev := tasks.Event{ID: req.ID, Type: req.Type, Data: req.Data}
	if req.Timestamp != nil {
		ev.Timestamp = req.Timestamp.UTC()
	}
	opts := &producer.PublishOpts{SkipPaused: req.SkipPaused}
	if req.NotBefore != nil {
		opts.NotBefore = *req.NotBefore
	}
	if req.SubscriberID != "" && tasks.ValidateSubscriberID(req.SubscriberID) != nil {
		return producer.BatchEvent{}, apiErr(http.StatusUnprocessableEntity, "invalid", "subscriber_id", "want 1-64 characters of A-Z a-z 0-9 . _ -")
	}
	return producer.BatchEvent{Event: ev, Opts: opts, To: req.SubscriberID}, nil
}

// batchItem is one event's answer: what writePublished would have sent.
func (s *Server) batchItem(res *producer.PublishResult, err error) BatchItem {
	if err != nil {
		ae := toAPIError(err)
		if ae.Status >= 500 {
			s.cfg.Logger.Error("batch publish: an event failed", "status", ae.Status, "err", err)
		}
		it := BatchItem{Status: ae.Status, Error: ae}
		if res != nil {
			it.EventID, it.Targets = res.EventID, res.Targets
		}
		return it
	}
	targets := res.Targets
	if targets == nil {
		targets = []producer.Target{}
	}
	return BatchItem{Status: publishedStatus(res), EventID: res.EventID, Targets: targets, Note: res.Note}
}

// publishedStatus is a publish's status: 202 when something new was
// booked (enqueued, scheduled or held); a repeat of an earlier publish
// (all duplicates) changes nothing and is a plain 200.
func publishedStatus(res *producer.PublishResult) int {
	for _, t := range res.Targets {
		if t.Outcome.Booked() {
			return http.StatusAccepted
		}
	}
	return http.StatusOK
}

// discard is the ResponseWriter decode is given for a batch's entry: its
// size limit is the entry's, not the connection's to close.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
