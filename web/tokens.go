package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hooklane/hooklane/producer"
)

// Tenant tokens. The API (/v1/) takes the operator's token (HOOKLANE_TOKEN:
// every route) or a tenant's (POST /v1/tenants/{tenant}/tokens): that one
// reaches its own tenant's routes only, /v1/tenants/<its tenant>/… and the
// routes without a tenant, which mean its tenant for it, each as its
// scopes allow (read: GET; publish: POST …/events and …/events/batch;
// manage: the rest). Any other tenant's routes, and the tenants' own
// (/v1/tenants, /v1/tenants/{tenant}, its tokens), answer it exactly what
// an unknown tenant answers: 404 unknown_tenant. asynqmon, /metrics and
// the console take the operator's token alone.

// tokenCache keeps a tenant token's lookup for a second (a revoked token
// is refused by every web process within a second), and when each was
// last recorded used (at most once a minute).
type tokenCache struct {
	mu      sync.Mutex
	m       map[[32]byte]cachedToken
	touched map[string]time.Time
}

type cachedToken struct {
	t  producer.Token
	ok bool // a live token; false: none (cached too, so that a wrong secret costs one lookup a second)
	at time.Time
}

func (c *tokenCache) lookup(ctx context.Context, p *producer.Producer, secret string) (producer.Token, bool, error) {
	key := sha256.Sum256([]byte(secret))
	c.mu.Lock()
	e, hit := c.m[key]
	c.mu.Unlock()
	if hit && time.Since(e.at) < time.Second {
		return e.t, e.ok, nil
	}
	t, err := p.LookupToken(ctx, secret)
	if err != nil && !errors.Is(err, producer.ErrUnknownToken) {
		return t, false, err // Redis: not cached
	}
	e = cachedToken{t: t, ok: err == nil, at: time.Now()}
	c.mu.Lock()
	if len(c.m) > 10_000 {
		clear(c.m)
	}
	c.m[key] = e
	touch := e.ok && time.Since(c.touched[t.ID]) > time.Minute
	if touch {
		if len(c.touched) > 10_000 {
			clear(c.touched)
		}
		c.touched[t.ID] = time.Now()
	}
	c.mu.Unlock()
	if touch {
		_ = p.TouchToken(ctx, t.ID, time.Now()) // a record, not a gate: a failure only loses the time
	}
	return e.t, e.ok, nil
}

// apiGuard is guard for the API: the operator's token, or a tenant's
// (routed to its tenant's routes, see above).
func (s *Server) apiGuard(api http.Handler) http.Handler {
	operator := guard(s.cfg.Token, "Bearer", api)
	want := sha256.Sum256([]byte(s.cfg.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := presented(r)
		sum := sha256.Sum256([]byte(got))
		if s.cfg.Token == "" || !ok || !strings.HasPrefix(got, producer.TokenPrefix) || subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			operator.ServeHTTP(w, r)
			return
		}
		t, live, err := s.tokens.lookup(r.Context(), s.p, got)
		if err != nil {
			writeError(w, s.cfg.Logger, err, nil)
			return
		}
		if !live {
			operator.ServeHTTP(w, r) // answers the 401
			return
		}
		if err := s.tenantRequest(r, t); err != nil {
			writeError(w, s.cfg.Logger, err, nil)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// tenantRequest routes r, made with tenant token t, to t's tenant's
// routes (the routes without a tenant rewritten to them), or refuses it:
// another tenant's routes and the tenants' own as an unknown tenant, a
// route its scopes do not allow 403.
func (s *Server) tenantRequest(r *http.Request, t producer.Token) error {
	path := r.URL.Path
	if rest, ok := strings.CutPrefix(path, "/v1/tenants/"); ok {
		name, sub, _ := strings.Cut(rest, "/")
		if name != t.Tenant || sub == "" || sub == "tokens" || strings.HasPrefix(sub, "tokens/") {
			return unknownTenant(name)
		}
	} else if path == "/v1/tenants" {
		return unknownTenant("")
	} else if rest, ok := strings.CutPrefix(path, "/v1/"); ok && rest != "openapi.json" {
		r.URL.Path = "/v1/tenants/" + t.Tenant + "/" + rest
		r.URL.RawPath = ""
	}
	scope := producer.ScopeManage
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		scope = producer.ScopeRead
	case r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/events") || strings.HasSuffix(r.URL.Path, "/events/batch")):
		scope = producer.ScopePublish
	}
	if !t.Allows(scope) {
		return apiErr(http.StatusForbidden, "forbidden", "", "this token's scopes (%s) do not include %s, which %s %s needs",
			strings.Join(t.Scopes, ", "), scope, r.Method, path)
	}
	return nil
}

// TokenRequest is the body of POST /v1/tenants/{tenant}/tokens.
type TokenRequest struct {
	Scopes    []string   `json:"scopes"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"` // absent: never
}

// TokenAnswer is a token as the API shows it; Token (its secret) only in
// the answer that created it.
type TokenAnswer struct {
	ID         string     `json:"id"`
	Tenant     string     `json:"tenant"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	Token      string     `json:"token,omitempty"`
}

func tokenView(t producer.Token) TokenAnswer {
	opt := func(x time.Time) *time.Time {
		if x.IsZero() {
			return nil
		}
		return &x
	}
	return TokenAnswer{ID: t.ID, Tenant: t.Tenant, Scopes: t.Scopes, CreatedAt: t.CreatedAt, ExpiresAt: opt(t.ExpiresAt), LastUsedAt: opt(t.LastUsedAt)}
}

// TokenList is the answer of GET /v1/tenants/{tenant}/tokens.
type TokenList struct {
	Tokens []TokenAnswer `json:"tokens"`
}

// createToken serves POST /v1/tenants/{tenant}/tokens (the operator's).
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	var req TokenRequest
	if err := decode(w, r, 4<<10, &req); err != nil {
		return err
	}
	var expires time.Time
	if req.ExpiresAt != nil {
		expires = *req.ExpiresAt
	}
	t, secret, err := s.p.CreateToken(r.Context(), r.PathValue("tenant"), req.Scopes, expires)
	if err != nil {
		return err
	}
	v := tokenView(t)
	v.Token = secret
	writeJSON(w, http.StatusCreated, v)
	return nil
}

// listTokens serves GET /v1/tenants/{tenant}/tokens (the operator's).
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("tenant")
	if _, err := s.p.GetTenant(r.Context(), name); err != nil {
		return err
	}
	ts, err := s.p.Tokens(r.Context(), name)
	if err != nil {
		return err
	}
	out := TokenList{Tokens: make([]TokenAnswer, len(ts))}
	for i, t := range ts {
		out.Tokens[i] = tokenView(t)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// revokeToken serves DELETE /v1/tenants/{tenant}/tokens/{id} (the
// operator's).
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	if err := s.p.RevokeToken(r.Context(), r.PathValue("tenant"), r.PathValue("token_id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
