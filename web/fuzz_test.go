package web_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web"
)

// fuzzRoutes are the endpoints FuzzAPIRequests calls: those that decode a
// body, and those that read what the others wrote.
var fuzzRoutes = []string{"PUT /v1/subscribers/fz", "POST /v1/events", "POST /v1/events/batch", "POST /v1/dead-letters/replay",
	"POST /v1/subscribers/fz/secrets/rotate", "GET /v1/subscribers/fz", "GET /v1/subscribers",
	"GET /v1/subscribers/fz/status", "POST /v1/subscribers/fz/test", "GET /v1/dead-letters"}

// decodingRoutes are the fuzzRoutes that read a JSON body.
var decodingRoutes = fuzzRoutes[:4]

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
// and message; a request without the right token is refused; a body is
// accepted only when each of its names is spelt as the document spells it
// (case and all) and given once in its object; and no answer
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
		`{"events":[{"id":"evt_1","type":"t","data":{}}],"Events":[]}`, `{"events":[{"id":"evt_1","TYPE":"t","data":{}}]}`,
		`{"grace":"24h"}`, `{"rate_limit":{"period":"-1s"}}`,
		// Names in another case, and names given twice: refused, but in an
		// event's data, whose names are the publisher's.
		`{"ID":"fz","url":"https://a.test/h"}`, `{"url":"https://a.test/h","URL":"https://b.test/h"}`,
		`{"url":"https://a.test/h","url":"https://b.test/h"}`, `{"id":"fz","id":"other","url":"https://a.test/h"}`,
		`{"url":"https://a.test/h","rate_limit":{"rate":1,"Rate":2,"burst":1,"period":"1s"}}`,
		`{"url":"https://a.test/h","rate_limit":{"rate":1,"rate":2,"burst":1,"period":"1s"}}`,
		`{"id":"evt_1","TYPE":"t","Data":{}}`, `{"id":"evt_1","type":"t","type":"u","data":1}`,
		`{"id":"evt_1","type":"t","data":{"a":1,"a":2,"A":3}}`,
		`{"subscriber":"s","Subscriber":"t"}`, `{"all":true,"all":true}`, `{"grace":"1h","grace":"0s"}`, `{"Grace":"1h"}`, `{}`, `[]`, `null`, `{"url":1}`, `{"id":"a"} {}`, "",
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
		if authorized && rec.Code/100 == 2 && slices.Contains(decodingRoutes, route) {
			// Case-sensitive names: the document lists each member, and
			// refuses any other (additionalProperties false).
			creq := httptest.NewRequest(method, path, nil)
			creq.Header.Set("Content-Type", "application/json")
			bearer(creq)
			for _, b := range acceptedBodies(t, route, body, rec.Body.Bytes()) {
				if err := theContract(t).checkRequest(creq, b); err != nil && strings.Contains(err.Error(), "is unsupported") {
					t.Fatalf("%s %q: accepted (%d) with a name the document does not spell so: %v", route, body, rec.Code, err)
				}
				if name, twice := givenTwice(b); twice {
					t.Fatalf("%s %q: accepted (%d) with %q given twice", route, body, rec.Code, name)
				}
			}
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

// givenTwice returns a name that body, a JSON object, gives twice in one
// of its objects, an event's data aside (its names are the publisher's).
// It reads with jsontext, not with the server's own reader.
func givenTwice(body []byte) (string, bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", false
	}
	seen := map[string]bool{}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return "", false
		}
		name := tok.String() // before the next read voids tok
		v, err := dec.ReadValue()
		if err != nil {
			return "", false
		}
		if seen[name] || name != "data" && !v.IsValid() { // IsValid refuses a duplicate name by default
			return name, true
		}
		seen[name] = true
	}
	return "", false
}

// acceptedBodies is what a 2xx answer to body accepted: body itself, but
// of a batch, whose events are answered each on its own (one refused for
// a misspelled name beside others accepted), the batch of the events its
// results accepted.
func acceptedBodies(t *testing.T, route string, body, answer []byte) [][]byte {
	if route != "POST /v1/events/batch" {
		return [][]byte{body}
	}
	var req map[string]json.RawMessage
	var events []json.RawMessage
	var ans struct {
		Results []struct {
			Status int `json:"status"`
		} `json:"results"`
	}
	if json.Unmarshal(body, &req) != nil || json.Unmarshal(req["events"], &events) != nil || json.Unmarshal(answer, &ans) != nil ||
		len(ans.Results) != len(events) {
		t.Fatalf("%s %q: accepted with an answer that does not answer each event: %s", route, body, answer)
	}
	var ok []json.RawMessage
	for i, r := range ans.Results {
		if r.Status/100 == 2 {
			ok = append(ok, events[i])
		}
	}
	top := []byte(`{}`)
	if len(req) != 1 {
		top = body // names beside "events": the checks name them
	}
	b, err := json.Marshal(map[string]any{"events": ok})
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{top, b}
}
