package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// EventRequest is the body of POST /v1/events. Each subscriber receives
// {"id","type","timestamp","data"}, exactly as from producer.Publish.
type EventRequest struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data"`
	Timestamp *time.Time      `json:"timestamp,omitempty"`  // default: now, whole seconds
	NotBefore *time.Time      `json:"not_before,omitempty"` // no request before this time
	// SubscriberID sends to this subscriber alone, whatever its event filter.
	SubscriberID string `json:"subscriber_id,omitempty"`
	// SkipPaused leaves paused subscribers out (outcome "skipped"): their
	// copy of the event is dropped. By default it is held for them
	// (outcome "held") and delivered once they are resumed.
	SkipPaused bool `json:"skip_paused,omitempty"`
}

func (s *Server) publish(w http.ResponseWriter, r *http.Request) error {
	// The body read first (as a batch's): a client slow to send it holds
	// no place. Then a place, then the token's rate: a refused publish
	// writes nothing.
	var req EventRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	leave, err := s.places.take()
	if err != nil {
		return err
	}
	defer leave()
	if err := s.ingest.allow(r.Context(), r); err != nil {
		return err
	}
	be, err := req.batchEvent()
	if err != nil {
		return err
	}
	var res *producer.PublishResult
	if be.To != "" {
		res, err = s.prod(r).SendTo(r.Context(), be.To, be.Event, be.Opts)
	} else {
		res, err = s.prod(r).Publish(r.Context(), be.Event, be.Opts)
	}
	return s.writePublished(w, res, err)
}

// writePublished answers a publish: its result, or its error with what
// happened to each target.
func (s *Server) writePublished(w http.ResponseWriter, res *producer.PublishResult, err error) error {
	if err != nil {
		if res != nil { // some targets failed: say what happened to each
			writeError(w, s.cfg.Logger, err, map[string]any{"event_id": res.EventID, "targets": res.Targets})
			return nil
		}
		return err
	}
	if res.Targets == nil {
		res.Targets = []producer.Target{}
	}
	writeJSON(w, publishedStatus(res), res)
	return nil
}

func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) error {
	q := producer.DeadLetterQuery{Subscriber: r.URL.Query().Get("subscriber")}
	if q.Subscriber != "" {
		// Any id a subscriber's dead letters may be stored under.
		if err := tasks.ValidateStoredSubscriberID(q.Subscriber); err != nil {
			return apiErr(http.StatusUnprocessableEntity, "invalid", "subscriber", "not a subscriber id")
		}
	}
	var err error
	if q.Limit, q.Since, q.Until, err = pageQuery(r, 10_000); err != nil {
		return err
	}
	switch v := r.URL.Query().Get("include_replayed"); v {
	case "", "false":
	case "true":
		q.IncludeReplayed = true
	default:
		return apiErr(http.StatusUnprocessableEntity, "invalid", "include_replayed", "want true or false, got %s", quoted(v))
	}
	q.Cursor = r.URL.Query().Get("cursor")
	dl, next, err := s.prod(r).DeadLetters(r.Context(), q)
	if err != nil {
		return err
	}
	if dl == nil {
		dl = []tasks.DeadLetter{}
	}
	writeJSON(w, http.StatusOK, DeadLetterPage{DeadLetters: dl, NextCursor: next})
	return nil
}

// DeadLetterPage is the answer of GET /v1/dead-letters: one page, newest
// first. NextCursor, when set, gets the next page (?cursor=): a page may be
// short, or empty, and still have one after it.
type DeadLetterPage struct {
	DeadLetters []tasks.DeadLetter `json:"dead_letters"`
	NextCursor  string             `json:"next_cursor,omitempty"`
}

// ReplayRequest is the body of POST /v1/dead-letters/replay: the dead
// letters of one subscriber, or those with the given task ids, or (All)
// every one; Since and Until narrow any of these to a time range. One call
// replays at most Limit (default 1,000) and answers a NextCursor to go on
// with: call again with it until there is none. A replay cut off halfway
// is finished by sending the same request again: what was replayed is
// skipped.
type ReplayRequest struct {
	Subscriber string    `json:"subscriber,omitempty"`
	IDs        []string  `json:"ids,omitempty"`
	All        bool      `json:"all,omitempty"`
	Since      time.Time `json:"since,omitzero"` // dead at or after
	Until      time.Time `json:"until,omitzero"` // dead before
	Limit      int       `json:"limit,omitempty"`
	Cursor     string    `json:"cursor,omitempty"`
}

// ReplayAnswer is the answer of POST /v1/dead-letters/replay.
type ReplayAnswer struct {
	Outcomes   []producer.ReplayOutcome `json:"outcomes"`
	NextCursor string                   `json:"next_cursor,omitempty"`
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request) error {
	var req ReplayRequest
	if err := decode(w, r, 1<<20, &req); err != nil {
		return err
	}
	if req.Subscriber == "" && len(req.IDs) == 0 && !req.All && req.Since.IsZero() && req.Until.IsZero() {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "subscriber",
			`name a subscriber, ids, a since/until range, or "all": true to replay every dead letter`)
	}
	if !req.Since.IsZero() && !req.Until.IsZero() && !req.Since.Before(req.Until) {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "until", "until must be after since")
	}
	if req.Subscriber != "" && tasks.ValidateStoredSubscriberID(req.Subscriber) != nil {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "subscriber", "not a subscriber id")
	}
	if len(req.IDs) > 10_000 {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "ids", "at most 10000 per call")
	}
	if req.Limit < 0 || req.Limit > 10_000 {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "limit", "want 1-10000 (default 1000)")
	}
	out, next, err := s.prod(r).Replay(r.Context(), producer.DeadLetterQuery{Subscriber: req.Subscriber, IDs: req.IDs,
		Since: req.Since, Until: req.Until, Limit: req.Limit, Cursor: req.Cursor})
	if out == nil {
		out = []producer.ReplayOutcome{}
	}
	if errors.Is(err, producer.ErrRedisUnavailable) || errors.Is(err, producer.ErrBadCursor) {
		writeError(w, s.cfg.Logger, err, map[string]any{"outcomes": out, "next_cursor": next})
		return nil
	}
	// Entries that could not be replayed (subscriber deleted, payload
	// unreadable) are listed as failed with their reason; the rest went.
	writeJSON(w, http.StatusOK, ReplayAnswer{Outcomes: out, NextCursor: next})
	return nil
}

func (s *Server) deleteDeadLetter(w http.ResponseWriter, r *http.Request) error {
	if err := s.prod(r).DeleteDeadLetter(r.Context(), r.PathValue("task_id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pageQuery reads a list's limit (1 to most, 0 when absent), since and
// until (RFC 3339) query parameters.
func pageQuery(r *http.Request, most int) (limit int, since, until time.Time, err error) {
	if v := r.URL.Query().Get("limit"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > most {
			return 0, since, until, apiErr(http.StatusUnprocessableEntity, "invalid", "limit", "want a whole number from 1 to %d, got %s", most, quoted(v))
		}
		limit = n
	}
	for name, dst := range map[string]*time.Time{"since": &since, "until": &until} {
		if v := r.URL.Query().Get(name); v != "" {
			t, perr := time.Parse(time.RFC3339Nano, v)
			if perr != nil {
				return 0, since, until, apiErr(http.StatusUnprocessableEntity, "invalid", name, "want %s, got %s", timeWanted, quoted(v))
			}
			*dst = t
		}
	}
	return limit, since, until, nil
}
