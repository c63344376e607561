package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/hooklane/hooklane/producer"
)

// The portal: the console, scoped to one tenant, for that tenant's users.
// POST /v1/tenants/{tenant}/portal (the operator's token, or the tenant's
// with manage) answers a link usable once; GET /portal/<link> spends it and
// sets a session cookie bound to the tenant that ends when the link would
// have (producer.CreatePortalLink). With that cookie the console's pages
// and actions go through the tenant's Producer (console.prod), so they
// show and change its endpoints, deliveries and dead letters alone, within
// the caps set on it; asynqmon, /metrics and the API never take the
// cookie. Its form tokens are bound to the session as well as to their
// action.

// portalCookie is the session cookie's name; it is sent to /console/ only.
const portalCookie = "hooklane_portal"

// PortalRequest is the (optional) body of POST …/portal.
type PortalRequest struct {
	ExpiresIn string `json:"expires_in,omitempty"`
}

// PortalLink is the answer of POST …/portal.
type PortalLink struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// createPortal serves POST /v1/portal and /v1/tenants/{tenant}/portal.
func (s *Server) createPortal(w http.ResponseWriter, r *http.Request) error {
	var req PortalRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, 1<<10, &req); err != nil {
			return err
		}
	}
	life := producer.MaxPortalLife
	if req.ExpiresIn != "" {
		d, err := parseDuration(req.ExpiresIn)
		if err != nil || d < time.Minute || d > producer.MaxPortalLife {
			return apiErr(http.StatusUnprocessableEntity, "invalid", "expires_in", "want a duration from 1m to 1h, got %s", quoted(req.ExpiresIn))
		}
		life = d
	}
	secret, g, err := s.p.CreatePortalLink(r.Context(), s.prod(r).TenantName(), life)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, PortalLink{URL: s.publicURL(r) + "/portal/" + secret, ExpiresAt: g.Expires})
	return nil
}

// publicURL is the origin links are made with: Config.PublicURL, else the
// request's own (https when it came through TLS or a proxy says so).
func (s *Server) publicURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimSuffix(s.cfg.PublicURL, "/")
	}
	scheme := "http"
	if secureRequest(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// openPortal serves GET /portal/{link}: spends the link and opens the
// console with its session.
func (s *Server) openPortal(w http.ResponseWriter, r *http.Request) {
	secret, g, err := s.p.RedeemPortalLink(r.Context(), r.PathValue("link"))
	if errors.Is(err, producer.ErrUnknownPortal) {
		s.console.renderError(w, r, apiErr(http.StatusGone, "portal_link_spent", "",
			"this portal link was used already, has expired, or never was: ask for a new one"))
		return
	}
	if err != nil {
		s.console.renderError(w, r, err)
		return
	}
	s.setPortalCookie(w, r, secret, g.Expires)
	http.Redirect(w, r, "/console/subscribers", http.StatusSeeOther)
}

func (s *Server) setPortalCookie(w http.ResponseWriter, r *http.Request, value string, expires time.Time) {
	c := &http.Cookie{Name: portalCookie, Value: value, Path: "/console/", Expires: expires, HttpOnly: true,
		Secure: secureRequest(r) || strings.HasPrefix(s.cfg.PublicURL, "https:"), SameSite: http.SameSiteLaxMode}
	if c.Secure && s.cfg.PortalFrameAncestors != "" {
		// Framed by another site's page: a cookie it may send there.
		c.SameSite = http.SameSiteNoneMode
	}
	if value == "" {
		c.Expires, c.MaxAge = time.Time{}, -1
	}
	http.SetCookie(w, c)
}

// consoleScope is whose console a request sees: a portal session's
// tenant (session: its digest, which its form tokens are bound to), or,
// with no scope, the operator's default tenant.
type consoleScope struct {
	t       routeTenant
	session string
}

type consoleScopeKey struct{}

func scopeOf(r *http.Request) (consoleScope, bool) {
	sc, ok := r.Context().Value(consoleScopeKey{}).(consoleScope)
	return sc, ok
}

// consoleGuard lets a console request through with a live portal
// session's cookie (scoped to its tenant), else with the operator's token.
func (s *Server) consoleGuard(next http.Handler) http.Handler {
	operator := guard(s.cfg.Token, "Basic", next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(portalCookie)
		if err != nil || ck.Value == "" {
			operator.ServeHTTP(w, r)
			return
		}
		g, err := s.p.PortalSession(r.Context(), ck.Value)
		var t routeTenant
		if err == nil {
			t, err = s.tenants.producer(r.Context(), s.p, g.Tenant)
		}
		var ae *APIError
		if errors.Is(err, producer.ErrUnknownPortal) || errors.As(err, &ae) && ae.Code == "unknown_tenant" {
			s.setPortalCookie(w, r, "", time.Time{})
			s.console.renderError(w, r, apiErr(http.StatusUnauthorized, "portal_session_ended", "",
				"this portal session has ended: open a new portal link"))
			return
		}
		if err != nil {
			s.console.renderError(w, r, err)
			return
		}
		sum := sha256.Sum256([]byte(ck.Value))
		ctx := context.WithValue(r.Context(), consoleScopeKey{}, consoleScope{t: t, session: hex.EncodeToString(sum[:])})
		ctx = context.WithValue(ctx, tenantKey{}, t) // its ingest limit (a test event)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// signOut serves POST /console/signout: ends the portal session.
func (c *console) signOut(w http.ResponseWriter, r *http.Request) error {
	if ck, err := r.Cookie(portalCookie); err == nil {
		if err := c.s.p.EndPortalSession(r.Context(), ck.Value); err != nil {
			return err
		}
	}
	c.s.setPortalCookie(w, r, "", time.Time{})
	return c.render(w, http.StatusOK, "error.html", errorPage{base: base{Title: "Signed out"}, Status: http.StatusOK,
		Message: "You are signed out of the portal. Open a new portal link to come back."})
}

// prod is the Producer a console request acts through: its portal
// session's tenant's, else the default tenant's.
func (c *console) prod(r *http.Request) *producer.Producer {
	if sc, ok := scopeOf(r); ok {
		return sc.t.p
	}
	return c.s.def
}

// scoped is b with what the layout shows of r's scope.
func (c *console) scoped(r *http.Request, b base) base {
	if sc, ok := scopeOf(r); ok {
		b.Portal, b.FormSession = sc.t.info.Name, sc.session
	}
	return b
}
