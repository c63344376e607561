package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// PingType is the event type of POST /v1/subscribers/{id}/test.
const PingType = "hooklane.ping"

// ping sends the subscriber alone a hooklane.ping event, delivered like
// any other (signed with its secrets, within its limits, retried), so a
// receiver can check its signature verifier. Each call is a new event.
func (s *Server) ping(w http.ResponseWriter, r *http.Request) error {
	if err := s.ingest.allow(r.Context(), r); err != nil {
		return err
	}
	res, err := s.sendPing(r.Context(), s.prod(r), r.PathValue("id"))
	return s.writePublished(w, res, err)
}

// sendPing sends subscriber id alone a new hooklane.ping event (the API's
// test endpoint and the console's button).
func (s *Server) sendPing(ctx context.Context, p *producer.Producer, id string) (*producer.PublishResult, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	data, _ := json.Marshal(map[string]string{"subscriber_id": id})
	ev := tasks.Event{ID: "ping_" + hex.EncodeToString(b[:]), Type: PingType, Data: data}
	return p.SendOperatorEventTo(ctx, id, ev)
}
