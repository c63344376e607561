package web

import (
	"net/http"
)

// apiHandler is an endpoint that may fail with any error; toAPIError picks
// the status.
type apiHandler func(w http.ResponseWriter, r *http.Request) error

// apiRoute is one endpoint of the API: its http.ServeMux pattern ("METHOD
// /path") and the Server method that serves it.
type apiRoute struct {
	pattern string
	serve   func(s *Server, w http.ResponseWriter, r *http.Request) error
}

// apiRoutes is every endpoint under /v1/, the one list the mux is built
// from and the one the tests compare with openapi.json, both ways: an
// endpoint cannot be served without being described, nor described
// without being served.
var apiRoutes = func(rs []apiRoute) []apiRoute { return append(rs, tenantRoutes(rs)...) }([]apiRoute{
	{"GET /v1/tenants", (*Server).listTenants},
	{"PUT /v1/tenants/{tenant}", (*Server).putTenant},
	{"GET /v1/tenants/{tenant}", (*Server).getTenant},
	{"DELETE /v1/tenants/{tenant}", (*Server).deleteTenant},
	{"POST /v1/tenants/{tenant}/tokens", (*Server).createToken},
	{"GET /v1/tenants/{tenant}/tokens", (*Server).listTokens},
	{"DELETE /v1/tenants/{tenant}/tokens/{token_id}", (*Server).revokeToken},
	{"GET /v1/subscribers", (*Server).listSubscribers},
	{"PUT /v1/subscribers/{id}", (*Server).putSubscriber},
	{"GET /v1/subscribers/{id}", (*Server).getSubscriber},
	{"DELETE /v1/subscribers/{id}", (*Server).deleteSubscriber},
	{"POST /v1/subscribers/{id}/pause", (*Server).pause},
	{"POST /v1/subscribers/{id}/resume", (*Server).resume},
	{"POST /v1/subscribers/{id}/secrets/rotate", (*Server).rotateSecret},
	{"GET /v1/subscribers/{id}/status", (*Server).status},
	{"POST /v1/subscribers/{id}/cooldown/end", (*Server).endCooldown},
	{"POST /v1/subscribers/{id}/test", (*Server).ping},
	{"GET /v1/subscribers/{id}/deliveries", (*Server).listDeliveries},
	{"GET /v1/subscribers/{id}/deliveries/{event_id}", (*Server).getDelivery},
	{"POST /v1/subscribers/{id}/deliveries/{event_id}/resend", (*Server).resend},
	{"POST /v1/events", (*Server).publish},
	{"POST /v1/events/batch", (*Server).publishBatch},
	{"GET /v1/events/{id}", (*Server).getEvent},
	{"POST /v1/portal", (*Server).createPortal},
	{"GET /v1/dead-letters", (*Server).listDeadLetters},
	{"POST /v1/dead-letters/replay", (*Server).replay},
	{"DELETE /v1/dead-letters/{task_id}", (*Server).deleteDeadLetter},
	// routes serves GET before the token is checked; listed here too so
	// that another method on it is a 405 like on any other endpoint.
	{"GET /v1/openapi.json", func(_ *Server, w http.ResponseWriter, r *http.Request) error {
		serveOpenAPI(w, r)
		return nil
	}},
})

func (s *Server) api() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h apiHandler) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				writeError(w, s.cfg.Logger, err, nil)
			}
		})
	}
	for _, rt := range apiRoutes {
		handle(rt.pattern, func(w http.ResponseWriter, r *http.Request) error { return rt.serve(s, w, r) })
	}
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
