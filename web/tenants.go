package web

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// Tenants. Every resource route of the API is served twice: as
// /v1/<route>, the default tenant's, and as /v1/tenants/{tenant}/<route>,
// that tenant's (tenantRoutes), each seeing and changing its own
// subscribers, events, deliveries and dead letters by its own ids
// (producer.Producer.Tenant). A tenant's routes answer a tenant that is
// not registered (or is being deleted) 404 unknown_tenant.

// TenantRequest is the body of PUT /v1/tenants/{tenant}: its settings,
// each left out (or 0) for no limit of the tenant's own. A PUT replaces
// them all.
type TenantRequest struct {
	IngestRate     int    `json:"ingest_rate,omitempty"`
	IngestBurst    int    `json:"ingest_burst,omitempty"`
	MaxSubscribers int    `json:"max_subscribers,omitempty"`
	MaxRate        int    `json:"max_rate,omitempty"`
	MaxInFlight    int    `json:"max_in_flight,omitempty"`
	MaxAttempts    int    `json:"max_attempts,omitempty"`
	RetryHorizon   string `json:"retry_horizon,omitempty"`
}

// settings are r's as the producer takes them.
func (r TenantRequest) settings() (producer.TenantSettings, error) {
	var horizon time.Duration
	if r.RetryHorizon != "" {
		d, err := parseDuration(r.RetryHorizon)
		if err != nil {
			return producer.TenantSettings{}, apiErr(http.StatusUnprocessableEntity, "invalid", "retry_horizon",
				"want a duration such as 90s or 24h, got %s", quoted(r.RetryHorizon))
		}
		horizon = d
	}
	return producer.TenantSettings{IngestRate: r.IngestRate, IngestBurst: r.IngestBurst, MaxSubscribers: r.MaxSubscribers,
		MaxRate: r.MaxRate, MaxInFlight: r.MaxInFlight, MaxAttempts: r.MaxAttempts, RetryHorizon: tasks.Duration(horizon)}, nil
}

// Tenant is a tenant as the API shows it: its name, when it was
// registered, and its settings as a PUT gives them.
type Tenant struct {
	Name      string     `json:"name"`
	CreatedAt *time.Time `json:"created_at,omitempty"` // none for the default tenant
	TenantRequest
}

func tenantOf(t producer.TenantInfo) Tenant {
	s := t.TenantSettings
	out := Tenant{Name: t.Name, TenantRequest: TenantRequest{IngestRate: s.IngestRate, IngestBurst: s.IngestBurst,
		MaxSubscribers: s.MaxSubscribers, MaxRate: s.MaxRate, MaxInFlight: s.MaxInFlight, MaxAttempts: s.MaxAttempts}}
	if s.RetryHorizon > 0 {
		out.RetryHorizon = isoDuration(time.Duration(s.RetryHorizon))
	}
	if !t.CreatedAt.IsZero() {
		c := t.CreatedAt
		out.CreatedAt = &c
	}
	return out
}

// TenantList is the answer of GET /v1/tenants.
type TenantList struct {
	Tenants    []Tenant `json:"tenants"`
	NextCursor string   `json:"next_cursor,omitempty"`
}

// unknownTenant is what a tenant route answers for a tenant that is not
// registered, and a tenant token on a route that is not its own.
func unknownTenant(name string) error {
	return apiErr(http.StatusNotFound, "unknown_tenant", "", "no tenant %q", name)
}

// tenantKey is the request context's key of its route's tenant.
type tenantKey struct{}

// routeTenant is a tenant route's tenant: its Producer and its record.
type routeTenant struct {
	p    *producer.Producer
	info producer.TenantInfo
}

// prod is the Producer a request's route is for: its tenant's, or the
// default tenant's on the routes without one.
func (s *Server) prod(r *http.Request) *producer.Producer {
	if t, ok := r.Context().Value(tenantKey{}).(routeTenant); ok {
		return t.p
	}
	return s.def
}

// tenantSettings are the settings of a request's tenant (none on the
// routes without one: the default tenant has none of its own).
func tenantSettings(r *http.Request) (string, producer.TenantSettings) {
	if t, ok := r.Context().Value(tenantKey{}).(routeTenant); ok {
		return t.info.Name, t.info.TenantSettings
	}
	return "", producer.TenantSettings{}
}

// tenantRoutes are routes served again under /v1/tenants/{tenant}/, for
// that tenant.
func tenantRoutes(routes []apiRoute) []apiRoute {
	var out []apiRoute
	for _, rt := range routes {
		method, path, _ := strings.Cut(rt.pattern, " ")
		rest, ok := strings.CutPrefix(path, "/v1/")
		if !ok || rest == "openapi.json" || strings.HasPrefix(rest, "tenants") {
			continue
		}
		serve := rt.serve
		out = append(out, apiRoute{method + " /v1/tenants/{tenant}/" + rest, func(s *Server, w http.ResponseWriter, r *http.Request) error {
			t, err := s.tenants.producer(r.Context(), s.p, r.PathValue("tenant"))
			if err != nil {
				return err
			}
			return serve(s, w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, t)))
		}})
	}
	return out
}

// tenantCache remembers for a second which tenants are registered, so
// that a tenant's request does not read the registry each time: a tenant
// deleted is refused by every web process within a second.
type tenantCache struct {
	mu sync.Mutex
	m  map[string]cachedTenant
}

type cachedTenant struct {
	info producer.TenantInfo
	at   time.Time // when it was found registered
}

// producer is tenant name's, with its record, or 404 unknown_tenant.
func (c *tenantCache) producer(ctx context.Context, p *producer.Producer, name string) (routeTenant, error) {
	if tasks.ValidateTenant(name) != nil {
		return routeTenant{}, unknownTenant(name)
	}
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if !ok || time.Since(e.at) > time.Second {
		t, err := p.GetTenant(ctx, name)
		if errors.Is(err, producer.ErrUnknownTenant) || err == nil && t.Deleting {
			c.forget(name)
			return routeTenant{}, unknownTenant(name)
		}
		if err != nil {
			return routeTenant{}, err
		}
		e = cachedTenant{info: t, at: time.Now()}
		c.mu.Lock()
		if len(c.m) > 10_000 {
			clear(c.m)
		}
		c.m[name] = e
		c.mu.Unlock()
	}
	tp, err := p.Tenant(name)
	return routeTenant{p: tp, info: e.info}, err
}

func (c *tenantCache) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, name)
}

// putTenant serves PUT /v1/tenants/{tenant}: registers it with its
// settings (201), or sets the settings of one registered (200).
func (s *Server) putTenant(w http.ResponseWriter, r *http.Request) error {
	var req TenantRequest
	if r.ContentLength != 0 { // no body: no settings
		if err := decode(w, r, 1<<10, &req); err != nil {
			return err
		}
	}
	settings, err := req.settings()
	if err != nil {
		return err
	}
	name := r.PathValue("tenant")
	s.tenants.forget(name) // its new settings, here at once
	t, created, err := s.p.PutTenant(r.Context(), name, settings)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, tenantOf(t))
	return nil
}

// getTenant serves GET /v1/tenants/{tenant}.
func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) error {
	t, err := s.p.GetTenant(r.Context(), r.PathValue("tenant"))
	if err == nil && t.Deleting {
		err = producer.ErrUnknownTenant
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, tenantOf(t))
	return nil
}

// deleteTenant serves DELETE /v1/tenants/{tenant}: the tenant with
// everything it owns.
func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("tenant")
	s.tenants.forget(name)
	if err := s.p.DeleteTenant(r.Context(), name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listTenants serves GET /v1/tenants: a page of the registered tenants in
// name order (the default tenant, which always is, is not listed).
func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return apiErr(http.StatusUnprocessableEntity, "invalid", "limit", "want a whole number from 1 to 1000, got %s", quoted(v))
		}
		limit = n
	}
	after := q.Get("cursor")
	if after != "" && tasks.ValidateTenant(after) != nil {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "cursor", "not a cursor of this list: pass next_cursor as it was answered")
	}
	ts, next, err := s.p.Tenants(r.Context(), after, limit)
	if err != nil {
		return err
	}
	out := TenantList{Tenants: make([]Tenant, len(ts)), NextCursor: next}
	for i, t := range ts {
		out.Tenants[i] = tenantOf(t)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
