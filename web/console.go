package web

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// The console: server-rendered pages for an operator under /console/,
// behind the API's token (a browser's basic-auth prompt). Every value that
// comes from a receiver or a publisher reaches a page through html/template,
// which escapes it for where it lands; the pages need no script to work (the
// one static script only adds conveniences), so the CSP allows no inline
// script at all.

//go:embed console/*.html console/static
var consoleFiles embed.FS

// consoleCSP is sent with every console answer: scripts and styles only
// from the console's own static files (no inline script, no other origin,
// so an escaping bug elsewhere still cannot run a receiver's <script>), no
// plugins, no framing (clickjacking of the action buttons), and forms post
// only back to the console.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors "

// console holds the parsed pages and the key of the forms' tokens.
type console struct {
	s     *Server
	log   *slog.Logger
	pages map[string]*template.Template
	forms formKey
	now   func() time.Time
}

// pageHandler renders a page or fails; the error is rendered as a page
// with the status toAPIError gives it.
type pageHandler func(w http.ResponseWriter, r *http.Request) error

func newConsole(s *Server) (*console, error) {
	c := &console{s: s, log: s.cfg.Logger, forms: newFormKey(s.cfg.Token), now: time.Now}
	funcs := template.FuncMap{
		// A form's token is bound to the path the server will see, unescaped.
		"csrf": func(f formRef) string {
			action := f.Action
			if p, err := url.PathUnescape(action); err == nil {
				action = p
			}
			return c.forms.token(f.Session, action, c.now())
		},
		// form names a form of page: its action, and the session (if any) its token is bound to.
		"form": func(page interface{ formSession() string }, action string) formRef {
			return formRef{Session: page.formSession(), Action: action}
		},
		"subPath":      subscriberPath,
		"deliveryPath": deliveryPath,
		"eventPath":    eventPath,
		"ts":           formatTime,
		"iso":          func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"rel":          func(t time.Time) string { return relative(t, c.now()) },
		"plural":       func(n int, one, many string) string { return plural(n, one, many) },
		"words":        durationWords,
		"per":          perPeriod,
		"lastStatus":   lastStatus,
	}
	c.pages = map[string]*template.Template{}
	names, err := fs.Glob(consoleFiles, "console/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if n == "console/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(consoleFiles, "console/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("web: console template %s: %w", n, err)
		}
		c.pages[strings.TrimPrefix(n, "console/")] = t
	}
	return c, nil
}

// handler serves every /console/ route; routes puts the token's guard in
// front of it and consoleHeaders around both.
func (c *console) handler() http.Handler {
	mux := http.NewServeMux()
	get := func(pattern string, h pageHandler) { mux.Handle("GET "+pattern, c.page(h)) }
	post := func(pattern string, h pageHandler) { mux.Handle("POST "+pattern, c.checkForm(c.page(h))) }
	mux.Handle("GET /console/{$}", http.RedirectHandler("/console/subscribers", http.StatusFound))
	static, _ := fs.Sub(consoleFiles, "console/static")
	mux.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	get("/console/subscribers", c.subscribers)
	get("/console/subscribers/{id}", c.subscriber)
	get("/console/subscribers/{id}/deliveries/{event_id}", c.delivery)
	get("/console/events/{id}", c.event)
	get("/console/search", c.search)
	get("/console/deliveries", c.allDeliveries)
	post("/console/subscribers/{id}/pause", c.setPaused(true))
	post("/console/subscribers/{id}/resume", c.setPaused(false))
	post("/console/subscribers/{id}/test", c.sendTest)
	post("/console/subscribers/{id}/rotate", c.rotate)
	post("/console/subscribers/{id}/replay", c.replay)
	post("/console/subscribers/{id}/cooldown/end", c.endCooldown)
	get(createPath, c.newSubscriberForm)
	post(createPath, c.createSubscriber)
	get("/console/subscribers/{id}/edit", c.editSubscriberForm)
	post("/console/subscribers/{id}/edit", c.editSubscriber)
	post("/console/subscribers/{id}/delete", c.deleteSubscriber)
	post("/console/subscribers/{id}/deliveries/{event_id}/resend", c.resend)
	post("/console/signout", c.signOut)
	mux.Handle("/console/", c.page(func(w http.ResponseWriter, r *http.Request) error {
		return apiErr(http.StatusNotFound, "not_found", "", "no console page %s %s", r.Method, r.URL.Path)
	}))
	return mux
}

// consoleHeaders sets the security headers on every console answer, the
// token's 401 and the static files included.
// The portal (a portal link, a page with a portal session's cookie) may
// be framed by the pages Config.PortalFrameAncestors names; the operator's
// console never is.
func (s *Server) consoleHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		ancestors := "'none'"
		if _, err := r.Cookie(portalCookie); (err == nil || strings.HasPrefix(r.URL.Path, "/portal/")) && s.cfg.PortalFrameAncestors != "" {
			ancestors = s.cfg.PortalFrameAncestors
		} else {
			h.Set("X-Frame-Options", "DENY")
		}
		h.Set("Content-Security-Policy", consoleCSP+ancestors)
		h.Set("X-Content-Type-Options", "nosniff")
		// Same-origin: the form check can read a Referer from the console,
		// and no other site learns the ids in the console's URLs.
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/console/static/") {
			// Pages show delivery data and, once, a new secret: kept in no cache.
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

func (c *console) page(h pageHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			c.renderError(w, r, err)
		}
	})
}

// base is what every page's layout shows.
type base struct {
	Title  string
	Search string // the search box's value
	Flash  string // what the last action did
	// Refresh is the seconds after which the page reloads itself (0:
	// never): it shows a delivery under way (refreshFor).
	Refresh int
	// Portal is the tenant of a portal session ("": the operator's
	// console); FormSession the session's digest, which its forms'
	// tokens are bound to (console.scoped).
	Portal      string
	FormSession string
}

func (b base) formSession() string { return b.FormSession }

// formRef is a form's token's input: its action and its session.
type formRef struct{ Session, Action string }

// render executes page into a buffer first, so that a template error is a
// clean 500 instead of half a page.
func (c *console) render(w http.ResponseWriter, status int, page string, data any) error {
	t, ok := c.pages[page]
	if !ok {
		return fmt.Errorf("web: no console page %s", page)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", data); err != nil {
		return fmt.Errorf("web: console page %s: %w", page, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the browser went away: nothing to do
	return nil
}

type errorPage struct {
	base
	Status  int
	Code    string
	Message string
	Back    string
}

func (c *console) renderError(w http.ResponseWriter, r *http.Request, err error) {
	ae := toAPIError(err)
	if ae.Status >= 500 {
		c.log.Error("console request failed", "path", r.URL.Path, "status", ae.Status, "err", err)
	}
	if ae.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(ae.RetryAfter))
	}
	p := errorPage{base: c.scoped(r, base{Title: http.StatusText(ae.Status)}), Status: ae.Status, Code: ae.Code, Message: ae.Message}
	if ref, err := url.Parse(r.Referer()); err == nil && ref.Host == r.Host && strings.HasPrefix(ref.Path, "/console/") {
		p.Back = ref.RequestURI()
	}
	if rerr := c.render(w, ae.Status, "error.html", p); rerr != nil {
		c.log.Error("console error page failed", "err", rerr)
		http.Error(w, ae.Message, ae.Status)
	}
}

// seeOther answers an action with a redirect to the page that shows its
// result (POST, then GET: a reload does not repeat the action).
func seeOther(w http.ResponseWriter, r *http.Request, to string) error {
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// relative is t from now in words: "in 12s", "3m ago".
func relative(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now)
	word := "in "
	if d < 0 {
		d, word = -d, ""
	}
	var s string
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh", int(d.Hours()))
	default:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if word == "" {
		return s + " ago"
	}
	return word + s
}

// durationWords is a duration (a time.Duration, or a Go duration string
// as the API writes one) as a person writes it: "24 hours", not "24h0m0s".
func durationWords(v any) string {
	switch d := v.(type) {
	case time.Duration:
		return tasks.DurationWords(d)
	case string:
		if p, err := parseDuration(d); err == nil {
			return tasks.DurationWords(p)
		}
		return d
	}
	return fmt.Sprint(v)
}

// perPeriod is what follows "10 per" for a rate's period: "second",
// "minute", "hour", "day", or "10 seconds".
func perPeriod(period string) string {
	p, err := parseDuration(period)
	switch {
	case err != nil:
		return period
	case p == 24*time.Hour:
		return "day"
	}
	s := tasks.DurationWords(p)
	if one, ok := strings.CutPrefix(s, "1 "); ok && !strings.Contains(one, " ") {
		return one // "per second", not "per 1 second"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
