package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// A console action is a POST a browser makes with the operator's basic-auth
// credentials, which it also attaches to a form another site makes it
// submit (cross-site request forgery). Two checks refuse such a POST:
//
//   - the request's origin: Go's CrossOriginProtection (Sec-Fetch-Site,
//     else Origin against Host), and the Referer's host when a browser sent
//     neither;
//   - a token in the form, bound to the form's action and a time window.
//     Basic auth has no session to keep a random token in, so the token is
//     an HMAC of the action and the window, keyed by a hash of the server's
//     API token: every web process computes the same, and another site,
//     which cannot read the console's pages, cannot compute it.

// formWindow is how long one window of form tokens lasts; a token of the
// window before is accepted too, so a form works for 1 to 2 windows after
// its page was rendered.
const formWindow = time.Hour

// formKey keys the forms' tokens.
type formKey []byte

func newFormKey(apiToken string) formKey {
	if apiToken == "" {
		// No token (loopback only): a key of this process's own.
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		return k
	}
	// Not the token itself: a token in a page must not be an oracle for it.
	sum := sha256.Sum256([]byte("hooklane console form key\x00" + apiToken))
	return sum[:]
}

// token is the form token of action (a console path) in the window of at,
// for a portal session (its digest; "" for the operator's console).
func (k formKey) token(session, action string, at time.Time) string {
	return k.sign(session, action, at.Unix()/int64(formWindow.Seconds()))
}

func (k formKey) sign(session, action string, window int64) string {
	m := hmac.New(sha256.New, k)
	if session != "" {
		m.Write([]byte("portal " + session + "\n"))
	}
	m.Write([]byte(action + "\n" + strconv.FormatInt(window, 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// valid reports whether tok is action's token for session of the window
// of now or of the one before.
func (k formKey) valid(session, action, tok string, now time.Time) bool {
	w := now.Unix() / int64(formWindow.Seconds())
	for _, win := range []int64{w, w - 1} {
		if hmac.Equal([]byte(tok), []byte(k.sign(session, action, win))) {
			return true
		}
	}
	return false
}

var crossOrigin = http.NewCrossOriginProtection()

// checkForm lets a console POST through only from the console's own origin
// and with its form's token (field "csrf"); else it answers 403.
func (c *console) checkForm(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := sameOrigin(r); err != nil {
			c.log.Warn("console: cross-site request refused", "path", r.URL.Path, "origin", r.Header.Get("Origin"),
				"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
			c.renderError(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10) // the console's forms are a few fields
		if err := r.ParseForm(); err != nil {
			c.renderError(w, r, apiErr(http.StatusBadRequest, "bad_form", "", "unreadable form: %v", err))
			return
		}
		sc, _ := scopeOf(r)
		if !c.forms.valid(sc.session, r.URL.Path, r.PostForm.Get("csrf"), c.now()) {
			c.log.Warn("console: form without a valid token refused", "path", r.URL.Path)
			c.renderError(w, r, apiErr(http.StatusForbidden, "form_token", "",
				"this form's token is missing or expired (forms last an hour): reload the page and try again"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses a request a browser made from another origin.
func sameOrigin(r *http.Request) error {
	refused := apiErr(http.StatusForbidden, "cross_site", "", "refused: this action was sent from another site")
	if crossOrigin.Check(r) != nil {
		return refused
	}
	// Neither Sec-Fetch-Site nor Origin (an old browser, or a client that
	// is not one): a Referer, if any, must be the console's own.
	if r.Header.Get("Sec-Fetch-Site") == "" && r.Header.Get("Origin") == "" {
		if ref := r.Header.Get("Referer"); ref != "" {
			u, err := url.Parse(ref)
			if err != nil || u.Host != r.Host {
				return refused
			}
		}
	}
	return nil
}
