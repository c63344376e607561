package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// guard lets a request through when it carries token, as "Authorization:
// Bearer <token>" or as the password of HTTP basic auth (any user name), so
// that a browser can open the UI. challenge is the WWW-Authenticate scheme
// sent with a 401: "Basic" makes a browser ask for the password.
//
// With no token (allowed only on a loopback address) every request passes
// whose Host is a loopback name too: a web page the operator visits cannot
// reach the API through DNS rebinding, whose requests carry the attacker's
// host name.
func guard(token, challenge string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			if !loopbackHost(r.Host) {
				writeJSON(w, http.StatusForbidden, map[string]any{"error": apiErr(http.StatusForbidden, "forbidden", "",
					"no token is configured, so only requests to a loopback host name are served")})
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		got, ok := presented(r)
		// Comparing digests keeps the time independent of both the content
		// and the length of the token.
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", challenge+` realm="hooklane", charset="UTF-8"`)
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": apiErr(http.StatusUnauthorized, "unauthorized", "",
				"send the API token as Authorization: Bearer <token>, or as the basic-auth password")})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// presented returns the token a request carries.
func presented(r *http.Request) (string, bool) {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass, true
	}
	h := r.Header.Get("Authorization")
	if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(tok), true
	}
	return "", false
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
