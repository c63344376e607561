package web

import (
	"net/http"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// DeliveryPage is the answer of GET /v1/subscribers/{id}/deliveries: one
// page, newest published first, without attempts. NextCursor, when set,
// gets the next page (?cursor=): a page may be short, or empty, and still
// have one after it.
type DeliveryPage struct {
	Deliveries []tasks.DeliveryRecord `json:"deliveries"`
	NextCursor string                 `json:"next_cursor,omitempty"`
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	q := producer.DeliveryQuery{State: r.URL.Query().Get("state"), Cursor: r.URL.Query().Get("cursor")}
	var err error
	if q.Limit, q.Since, q.Until, err = pageQuery(r, 1000); err != nil {
		return err
	}
	page, next, err := s.prod(r).Deliveries(r.Context(), r.PathValue("id"), q)
	if err != nil {
		return err
	}
	if page == nil {
		page = []tasks.DeliveryRecord{}
	}
	writeJSON(w, http.StatusOK, DeliveryPage{Deliveries: page, NextCursor: next})
	return nil
}

func (s *Server) getDelivery(w http.ResponseWriter, r *http.Request) error {
	d, err := s.prod(r).GetDelivery(r.Context(), r.PathValue("id"), r.PathValue("event_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// resend sends a delivered (or dead) event to the subscriber again, with
// the same webhook-id; the answer is a publish's.
func (s *Server) resend(w http.ResponseWriter, r *http.Request) error {
	id, ev := r.PathValue("id"), r.PathValue("event_id")
	if err := s.ingest.allow(r.Context(), r); err != nil {
		return err
	}
	t, err := s.prod(r).Resend(r.Context(), id, ev)
	if err != nil {
		return err
	}
	return s.writePublished(w, &producer.PublishResult{EventID: ev, Targets: []producer.Target{t}}, nil)
}

func (s *Server) getEvent(w http.ResponseWriter, r *http.Request) error {
	e, err := s.prod(r).GetEvent(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}
