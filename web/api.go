package web

import (
	"net/http"
)

// apiHandler is an endpoint that may fail with any error; toAPIError picks
// the status.
type apiHandler func(w http.ResponseWriter, r *http.Request) error

func (s *Server) api() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h apiHandler) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				writeError(w, s.cfg.Logger, err, nil)
			}
		})
	}
	handle("GET /v1/subscribers", s.listSubscribers)
	handle("PUT /v1/subscribers/{id}", s.putSubscriber)
	handle("GET /v1/subscribers/{id}", s.getSubscriber)
	handle("DELETE /v1/subscribers/{id}", s.deleteSubscriber)
	handle("POST /v1/subscribers/{id}/pause", s.setPaused(true))
	handle("POST /v1/subscribers/{id}/resume", s.setPaused(false))
	handle("POST /v1/subscribers/{id}/secrets/rotate", s.rotateSecret)
	handle("GET /v1/subscribers/{id}/status", s.status)
	handle("POST /v1/subscribers/{id}/test", s.ping)
	handle("GET /v1/subscribers/{id}/deliveries", s.listDeliveries)
	handle("GET /v1/subscribers/{id}/deliveries/{event_id}", s.getDelivery)
	handle("POST /v1/subscribers/{id}/deliveries/{event_id}/resend", s.resend)
	handle("POST /v1/events", s.publish)
	handle("GET /v1/events/{id}", s.getEvent)
	handle("GET /v1/dead-letters", s.listDeadLetters)
	handle("POST /v1/dead-letters/replay", s.replay)
	handle("DELETE /v1/dead-letters/{task_id}", s.deleteDeadLetter)
	// routes serves GET before the token is checked; registered here too
	// so that another method on it is a 405 like on any other endpoint.
	handle("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) error {
		serveOpenAPI(w, r)
		return nil
	})
	// Everything else under /v1/ answers in JSON too: 405 when the path
	// exists for another method, else 404.
	handle("/v1/", func(w http.ResponseWriter, r *http.Request) error {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/v1/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header()["Allow"] = allow
			return apiErr(http.StatusMethodNotAllowed, "method_not_allowed", "", "%s is not allowed here; use %v", r.Method, allow)
		}
		return apiErr(http.StatusNotFound, "not_found", "", "no endpoint %s %s", r.Method, r.URL.Path)
	})
	return mux
}
