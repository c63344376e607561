package web_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web"
)

// fuzzRoutes are the endpoints FuzzAPIRequests calls: those that decode a
// body, and those that read what the others wrote.
var fuzzRoutes = []string{"PUT /v1/subscribers/fz", "POST /v1/events", "POST /v1/events/batch", "POST /v1/dead-letters/replay",
	"POST /v1/subscribers/fz/secrets/rotate", "GET /v1/subscribers/fz", "GET /v1/subscribers",
	"GET /v1/subscribers/fz/status", "POST /v1/subscribers/fz/test", "GET /v1/dead-letters"}

// fuzzAuth are the ways a request presents (or fails to present) the token.
var fuzzAuth = []func(r *http.Request){
	func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) },
	func(r *http.Request) { r.SetBasicAuth("anyone", token) },
	func(*http.Request) {},
	func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token[:len(token)-1]) },
	func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token+"x") },
	func(r *http.Request) { r.SetBasicAuth(token, "") },
	func(r *http.Request) { r.Header.Set("Authorization", "Token "+token) },
}

// FuzzAPIRequests sends arbitrary bodies, with the token or without it, to
// the endpoints that decode JSON and those that read, through the real
// handler and a real Redis. Whatever the body, the answer is one the
// contract (openapi.json) documents for the endpoint, a JSON object with a
// status from the documented set; an error answer names its code
// and message; a request without the right token is refused; and no answer
// shows a signing secret, except the generated or rotated one in the
// "secrets" of the answer that made it.
func FuzzAPIRequests(f *testing.F) {
	for _, seed := range []string{
		`{"url":"https://a.test/h","event_types":["video.*"],"rate_limit":{"rate":10,"burst":20,"period":"1s"},"max_in_flight":4}`,
		`{"url":"https://a.test/h","secrets":["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}`,
		`{"url":"https://a.test/h","secrets":["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw","whsec_bad"]}`,
		`{"id":"evt_1","type":"video.trending","data":{"v":1},"not_before":"2030-01-01T00:00:00Z"}`,
		`{"id":"evt_1","type":"t","data":{"s":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},"subscriber_id":"nobody"}`,
		`{"subscriber":"s","ids":["s:e1"]}`,
		`{"events":[{"id":"evt_1","type":"video.trending","data":{"v":1}},{"id":"evt_1","type":"video.trending","data":2},{"id":"x","type":1}]}`,
		`{"grace":"24h"}`, `{"rate_limit":{"period":"-1s"}}`, `{}`, `[]`, `null`, `{"url":1}`, `{"id":"a"} {}`, "",
	} {
		// Every way of presenting the token, wrong ones included, on every
		// route: the seed run alone tries them all.
		for i, route := range fuzzRoutes {
			for a := range fuzzAuth {
				f.Add(route, []byte(seed), uint8((i+a)%len(fuzzAuth)))
			}
		}
	}
	s, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: token, AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: testkit.Namespace("fuzz"), Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	// 429: a batch takes up to 100 of the token's ingest burst (2,000).
	allowed := []int{200, 201, 202, 204, 400, 404, 409, 413, 422, 429, 503}
	f.Fuzz(func(t *testing.T, route string, body []byte, auth uint8) {
		method, path, ok := strings.Cut(route, " ")
		if !ok || !slices.Contains(fuzzRoutes, route) {
			t.Skip()
		}
		authorized := int(auth)%len(fuzzAuth) < 2
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		fuzzAuth[int(auth)%len(fuzzAuth)](req)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		// The body is anything at all; the answer is the contract's.
		checkAnswer(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
		switch {
		case !authorized && rec.Code != http.StatusUnauthorized:
			t.Fatalf("%s %q with a wrong token (%d): status %d: %s", route, body, auth, rec.Code, rec.Body)
		case authorized && !slices.Contains(allowed, rec.Code):
			t.Fatalf("%s %q: status %d: %s", route, body, rec.Code, rec.Body)
		}
		if rec.Code == http.StatusNoContent {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s %q: answer is not a JSON object: %s", route, body, rec.Body)
		}
		if rec.Code >= 400 {
			e, _ := m["error"].(map[string]any)
			code, _ := e["code"].(string)
			msg, _ := e["message"].(string)
			if code == "" || msg == "" {
				t.Fatalf("%s %q: error without code or message: %s", route, body, rec.Body)
			}
		}
		// A secret may be shown once: in "secrets" of the 201 that
		// generated it or of the rotation that made it. Nowhere else, not
		// echoed in an error, not in a read.
		shown := rec.Code == http.StatusCreated && method == "PUT" || rec.Code == http.StatusOK && strings.HasSuffix(path, "/rotate")
		if shown {
			delete(m, "secrets")
		}
		if rest, _ := json.Marshal(m); anySecret.Match(rest) {
			t.Fatalf("%s %q: %d answer shows a secret: %s", route, body, rec.Code, rec.Body)
		}
	})
}
