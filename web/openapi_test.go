package web_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/hooklane/hooklane/web"
)

// GET /v1/openapi.json answers the document in the repository, every path
// of it as it is there (and each resource path again under
// /v1/tenants/{tenant}/), without a token, and it loads as a valid
// OpenAPI 3.1 document.
// Another method on it is refused like on any endpoint: 401 without the
// token, 405 with it.
func TestOpenAPIIsServedWithoutToken(t *testing.T) {
	b := setup(t, nil)
	r := b.callAuth(t, "GET", "/v1/openapi.json", nil, nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	file, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.body, web.OpenAPI()) {
		t.Fatal("the served document is not web.OpenAPI()")
	}
	var inFile, served struct{ Paths map[string]json.RawMessage }
	if err := json.Unmarshal(file, &inFile); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(r.body, &served); err != nil {
		t.Fatal(err)
	}
	for p, item := range inFile.Paths {
		var a, b any
		_ = json.Unmarshal(item, &a)
		_ = json.Unmarshal(served.Paths[p], &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("path %s is not served as openapi.json has it", p)
		}
	}
	if _, ok := served.Paths["/v1/tenants/{tenant}/subscribers/{id}"]; !ok {
		t.Error("the tenants' paths are not served")
	}
	doc, err := openapi3.NewLoader().LoadFromData(r.body)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil || doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Fatalf("served document: openapi %q, %v; want a valid 3.1.0 document", doc.OpenAPI, err)
	}
	if r := b.callRaw(t, "POST", "/v1/openapi.json", nil, nil); r.status != 401 {
		t.Errorf("POST /v1/openapi.json without a token: %d %s", r.status, r.body)
	}
	if r := b.callRaw(t, "POST", "/v1/openapi.json", nil, bearer); r.status != 405 || r.header.Get("Allow") != "GET" {
		t.Errorf("POST /v1/openapi.json: %d, Allow %q; want 405, GET", r.status, r.header.Get("Allow"))
	}
}

// The validator the tests rely on fails what breaks the document, on
// either side, for the reason it breaks it (each failure is named, so that
// a case cannot pass by failing for another reason, such as a route not
// found), and passes what keeps it.
func TestContractCatchesMismatches(t *testing.T) {
	t.Parallel()
	c := theContract(t)
	const sub = `{"id":"acme","url":"https://a.test/h","event_types":[],"rate_limit":{"rate":10,"burst":20,"period":"1s"},"max_in_flight":10,"paused":false}`
	const status = `{"subscriber_id":"acme","paused":false,"rate_limit":{"rate":10,"burst":20,"period":"1s"},"max_in_flight":10,` +
		`"cooling_until":%s,"in_flight":0,"counts":{"delivered":1,"scheduled":0,"retrying":0,"dead":0,"failed":0,"deferred":0},` +
		`"breaker":{"state":"closed","consecutive_failures":0,"failing_since":null,"opened_at":null,"next_probe":null,"last_error_at":null,"slow_start_since":null},` +
		`"effective_rate":{"rate":10,"period":"1s","since":null},"cooldown_ended_by_operator_at":null}`
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	retry := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"5"}}
	for _, a := range []struct {
		name, method, path string
		status             int
		header             http.Header
		body               string
		want               string // in the validator's error; "": no error
	}{
		{"a subscriber", "GET", "/v1/subscribers/acme", 200, jsonCT, sub, ""},
		{"a number as a string", "GET", "/v1/subscribers/acme", 200, jsonCT, strings.Replace(sub, `"max_in_flight":10`, `"max_in_flight":"10"`, 1), "at /max_in_flight: value must be an integer"},
		{"an undocumented field", "GET", "/v1/subscribers/acme", 200, jsonCT, strings.Replace(sub, `"paused":false`, `"paused":false,"colour":"red"`, 1), `property "colour" is unsupported`},
		{"a required field missing", "GET", "/v1/subscribers/acme", 200, jsonCT, strings.Replace(sub, `,"paused":false`, ``, 1), `property "paused" is missing`},
		{"an undocumented status", "GET", "/v1/subscribers/acme", 418, jsonCT, `{"error":{"code":"internal","message":"teapot"}}`, "status is not supported"},
		{"a status another endpoint has", "GET", "/v1/subscribers/acme", 429, retry, `{"error":{"code":"rate_limited","message":"slow down"}}`, "status is not supported"},
		{"not JSON", "GET", "/v1/subscribers/acme", 200, http.Header{"Content-Type": {"text/plain"}}, sub, "Content-Type has unexpected value"},
		{"cooling_until null", "GET", "/v1/subscribers/acme/status", 200, jsonCT, strings.Replace(status, "%s", "null", 1), ""},
		{"cooling_until a time", "GET", "/v1/subscribers/acme/status", 200, jsonCT, strings.Replace(status, "%s", `"2026-07-11T08:15:02Z"`, 1), ""},
		{"cooling_until a number", "GET", "/v1/subscribers/acme/status", 200, jsonCT, strings.Replace(status, "%s", "5", 1), "at /cooling_until: value must be one of string, null"},
		{"an unknown breaker state", "GET", "/v1/subscribers/acme/status", 200, jsonCT, strings.Replace(strings.Replace(status, "%s", "null", 1), `"closed"`, `"half-open"`, 1), "at /breaker/state: value is not one of the allowed values"},
		{"a 503", "GET", "/v1/subscribers", 503, retry, `{"error":{"code":"redis_unavailable","message":"down"}}`, ""},
		{"a 503 without Retry-After", "GET", "/v1/subscribers", 503, jsonCT, `{"error":{"code":"redis_unavailable","message":"down"}}`, `response header "Retry-After" missing`},
		{"a 503 with another status's code", "GET", "/v1/subscribers", 503, retry, `{"error":{"code":"invalid","message":"down"}}`, `doesn't match all schemas from "allOf"`},
		{"an error without a message", "GET", "/v1/subscribers", 422, jsonCT, `{"error":{"code":"invalid","field":"limit"}}`, `doesn't match all schemas from "allOf"`},
		{"a publish's failed targets", "POST", "/v1/events", 503, retry, `{"error":{"code":"redis_unavailable","message":"down"},"event_id":"e1","targets":[{"subscriber_id":"s","task_id":"s:e1","outcome":"failed"}]}`, ""},
		{"an unknown outcome", "POST", "/v1/events", 202, jsonCT, `{"event_id":"e1","targets":[{"subscriber_id":"s","task_id":"s:e1","outcome":"sent"}]}`, "at /targets/0/outcome: value is not one of the allowed values"},
		{"the fallback's 404", "GET", "/v1/nothing", 404, jsonCT, `{"error":{"code":"not_found","message":"no endpoint GET /v1/nothing"}}`, ""},
		{"a 200 where the fallback answers", "GET", "/v1/nothing", 200, jsonCT, `{}`, "status is not supported"},
		{"the fallback's 405 without Allow", "PATCH", "/v1/subscribers/acme", 405, jsonCT, `{"error":{"code":"method_not_allowed","message":"no"}}`, `response header "Allow" missing`},
	} {
		req := httptest.NewRequest(a.method, a.path, nil)
		err := c.checkAnswer(req, a.status, a.header, []byte(a.body))
		if !failsWith(err, a.want) {
			t.Errorf("answer, %s: %v; want %q", a.name, err, a.want)
		}
	}

	for _, q := range []struct {
		name, method, path, body string
		auth                     func(*http.Request)
		want                     string // in the validator's error; "": no error
	}{
		{"a subscriber", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h","rate_limit":{"rate":1,"burst":1,"period":"1s"}}`, bearer, ""},
		{"basic auth", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h"}`, func(r *http.Request) { r.SetBasicAuth("x", token) }, ""},
		{"no credentials", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h"}`, nil, "security requirements failed"},
		{"an unknown field", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h","urls":[]}`, bearer, `property "urls" is unsupported`},
		{"a string for a number", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h","max_in_flight":"4"}`, bearer, "at /max_in_flight: value must be an integer"},
		{"no url", "PUT", "/v1/subscribers/acme", `{}`, bearer, `property "url" is missing`},
		{"a bad id", "PUT", "/v1/subscribers/a:b", `{"url":"https://a.test/h"}`, bearer, `parameter "id" in path has an error`},
		{"malformed JSON", "PUT", "/v1/subscribers/acme", `{"url":`, bearer, "failed to decode request body"},
		{"an event", "POST", "/v1/events", `{"id":"e1","type":"t","data":null}`, bearer, ""},
		{"an event of hooklane's own type", "POST", "/v1/events", `{"id":"e1","type":"hooklane.ping","data":null}`, bearer, "at /type"},
		{"an event id URL cleaning changes", "POST", "/v1/events", `{"id":"..","type":"t","data":null}`, bearer, "at /id: string doesn't match the regular expression"},
		{"an event id of dots", "POST", "/v1/events", `{"id":"...","type":"t","data":null}`, bearer, ""},
		{"a subscriber id URL cleaning changes", "PUT", "/v1/subscribers/%2E%2E", `{"url":"https://a.test/h"}`, bearer, `parameter "id" in path has an error`},
		{"a url with credentials", "PUT", "/v1/subscribers/acme", `{"url":"https://u:p@a.test/h"}`, bearer, "at /url: string doesn't match the regular expression"},
		{"an event without data", "POST", "/v1/events", `{"id":"e1","type":"t"}`, bearer, `property "data" is missing`},
		{"a body where none is taken", "POST", "/v1/subscribers/acme/pause", `{}`, bearer, "request body not allowed"},
		{"a rotation without a body", "POST", "/v1/subscribers/acme/secrets/rotate", "", bearer, ""},
		{"a limit out of range", "GET", "/v1/subscribers?limit=0", "", bearer, `parameter "limit" in query has an error`},
		{"a limit", "GET", "/v1/subscribers?limit=1000&cursor=x", "", bearer, ""},
		{"an undocumented method", "PATCH", "/v1/subscribers/acme", "", bearer, "method not allowed"},
		{"an undocumented path", "GET", "/v1/nothing", "", bearer, "no matching operation"},
		{"the document, without a token", "GET", "/v1/openapi.json", "", nil, ""},
	} {
		var body []byte
		if q.body != "" {
			body = []byte(q.body)
		}
		req := httptest.NewRequest(q.method, q.path, bytes.NewReader(body))
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if q.auth != nil {
			q.auth(req)
		}
		err := c.checkRequest(req, body)
		if !failsWith(err, q.want) {
			t.Errorf("request, %s: %v; want %q", q.name, err, q.want)
		}
	}
}

// The API tests' own transport (checked, behind bundle.call) fails the
// test it serves when an answer is outside its schema, naming the field,
// and passes one within it: a server answering a subscriber with a string
// for max_in_flight is caught.
func TestCheckedTransportFailsAWrongAnswer(t *testing.T) {
	t.Parallel()
	const sub = `{"id":"acme","url":"https://a.test/h","event_types":[],"rate_limit":{"rate":10,"burst":20,"period":"1s"},"max_in_flight":10,"paused":false}`
	for _, c := range []struct{ name, body, want string }{
		{"within the schema", sub, ""},
		{"a number as a string", strings.Replace(sub, `"max_in_flight":10`, `"max_in_flight":"10"`, 1), "at /max_in_flight: value must be an integer"},
	} {
		srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, c.body)
		}))
		rec := &recordingTB{TB: t}
		client := &http.Client{Transport: checked{t: rec, next: http.DefaultTransport}}
		req, _ := http.NewRequest("GET", srv.URL+"/v1/subscribers/acme", nil)
		bearer(req)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		caught := len(rec.errs) == 1 && strings.HasPrefix(rec.errs[0], "contract: the 200 answer") && strings.Contains(rec.errs[0], c.want)
		if c.want == "" && len(rec.errs) != 0 || c.want != "" && !caught {
			t.Errorf("%s: the transport reported %q; want %q", c.name, rec.errs, c.want)
		}
	}
}

// recordingTB is a testing.TB that keeps what Errorf is told instead of
// failing the test.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recordingTB) Helper() {}

// failsWith reports whether err is what a case wants: no error for "",
// else an error that says want.
func failsWith(err error, want string) bool {
	if want == "" {
		return err == nil
	}
	return err != nil && strings.Contains(err.Error(), want)
}

// Every endpoint of the table the API's mux is built from (apiRoutes) is
// in the document, and every /v1/ operation of the document is in the
// table: a new endpoint fails this test until it is described, and a
// described one until it is served.
func TestEveryRouteIsDocumented(t *testing.T) {
	t.Parallel()
	served := map[string]bool{}
	for _, p := range web.APIRoutePatterns() {
		if served[p] {
			t.Errorf("apiRoutes lists %s twice", p)
		}
		served[p] = true
	}
	documented := map[string]bool{}
	for _, op := range documentedOperations(theContract(t).doc) {
		if strings.HasPrefix(op.path, "/v1/") {
			documented[op.method+" "+op.path] = true
		}
	}
	if len(served) < 18 {
		t.Fatalf("apiRoutes has %d entries; want every endpoint", len(served))
	}
	for _, p := range slices.Sorted(maps.Keys(served)) {
		if !documented[p] {
			t.Errorf("%s is served (apiRoutes) but not in openapi.json", p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(documented)) {
		if !served[p] {
			t.Errorf("%s is in openapi.json but not served (apiRoutes)", p)
		}
	}
}

type operation struct {
	method, path string
	op           *openapi3.Operation
}

// documentedOperations lists the document's operations, path by path.
func documentedOperations(doc *openapi3.T) []operation {
	var ops []operation
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		for _, m := range []string{"GET", "PUT", "POST", "DELETE"} {
			if op := item.GetOperation(m); op != nil {
				ops = append(ops, operation{m, path, op})
			}
		}
	}
	return ops
}

// refusals are the answers an example request gets from a server without
// a worker: the example delivery is still under way (so it cannot be
// resent), and nothing was dead-lettered. Every other operation succeeds.
var refusals = map[string]struct {
	status int
	code   string
}{
	"POST /v1/subscribers/{id}/deliveries/{event_id}/resend":                  {409, "delivery_active"},
	"DELETE /v1/dead-letters/{task_id}":                                       {404, "unknown_dead_letter"},
	"POST /v1/tenants/{tenant}/subscribers/{id}/deliveries/{event_id}/resend": {409, "delivery_active"},
	"DELETE /v1/tenants/{tenant}/dead-letters/{task_id}":                      {404, "unknown_dead_letter"},
	"DELETE /v1/tenants/{tenant}/tokens/{token_id}":                           {404, "unknown_token"},
}

// Every documented operation, called with each of its request examples
// (path parameters from theirs), is served: it answers a status the
// document lists for it, and a success (2xx), or for the few in refusals
// exactly that refusal; never a 5xx, the fallback's 404 or 405, or a
// refusal of the example. The subscriber is created first and the events
// published next, so that the rest finds the example subscriber and
// delivery; deletions go last.
// Every other method on a documented path answers the fallback's 405.
func TestEveryDocumentedOperationIsServed(t *testing.T) {
	b := setup(t, nil)
	doc := theContract(t).doc
	ops := documentedOperations(doc)
	rank := func(o operation) int {
		switch {
		case o.method == "PUT" && o.path == "/v1/tenants/{tenant}":
			return -1
		case o.method == "DELETE" && o.path == "/v1/tenants/{tenant}":
			return 4
		case o.method == "PUT":
			return 0
		case o.method == "POST" && (o.path == "/v1/events" || o.path == "/v1/tenants/{tenant}/events"):
			return 1
		case o.method == "DELETE":
			return 3
		}
		return 2
	}
	slices.SortStableFunc(ops, func(x, y operation) int { return cmp.Compare(rank(x), rank(y)) })
	for _, o := range ops {
		path := o.path
		for _, p := range append(doc.Paths.Value(o.path).Parameters, o.op.Parameters...) {
			if p.Value.In == "path" {
				ex, ok := p.Value.Example.(string)
				if !ok {
					t.Fatalf("%s %s: path parameter %s without an example", o.method, o.path, p.Value.Name)
				}
				path = strings.ReplaceAll(path, "{"+p.Value.Name+"}", ex)
			}
		}
		bodies := []any{nil}
		if rb := o.op.RequestBody; rb != nil {
			bodies = nil
			examples := rb.Value.Content.Get("application/json").Examples
			for _, name := range slices.Sorted(maps.Keys(examples)) {
				bodies = append(bodies, examples[name].Value.Value)
			}
			if len(bodies) == 0 {
				t.Errorf("%s %s: a request body without an example", o.method, o.path)
			}
		}
		for _, body := range bodies {
			r := b.call(t, o.method, path, body)
			var code string
			if r.status >= 300 {
				code, _ = r.errorOf(t)
			}
			if o.op.Responses.Status(r.status) == nil {
				t.Errorf("%s %s %v: %d %s; not a status the document lists for it", o.method, path, body, r.status, r.body)
			}
			refusal, refused := refusals[o.method+" "+o.path]
			switch {
			case refused && (r.status != refusal.status || code != refusal.code):
				t.Errorf("%s %s %v: %d %s; want %d %s", o.method, path, body, r.status, r.body, refusal.status, refusal.code)
			case !refused && (r.status < 200 || r.status > 299):
				t.Errorf("%s %s %v: %d %s; want it served and the example accepted", o.method, path, body, r.status, r.body)
			}
		}
	}
	for _, path := range doc.Paths.InMatchingOrder() {
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		concrete := strings.NewReplacer("{id}", "acme", "{task_id}", "acme:e1", "{tenant}", "acme").Replace(path)
		for _, m := range []string{"GET", "PUT", "POST", "DELETE"} {
			// DELETE /v1/dead-letters/replay is DELETE /v1/dead-letters/{task_id},
			// GET /v1/events/batch GET /v1/events/{id}.
			rest := strings.TrimPrefix(path, "/v1/tenants/{tenant}")
			if doc.Paths.Value(path).GetOperation(m) != nil || m == "DELETE" && rest == "/v1/dead-letters/replay" ||
				m == "GET" && rest == "/v1/events/batch" || m == "DELETE" && rest == "/dead-letters/replay" ||
				m == "GET" && rest == "/events/batch" {
				continue
			}
			if r := b.callRaw(t, m, concrete, nil, bearer); r.status != 405 || len(r.header.Values("Allow")) == 0 {
				t.Errorf("%s %s: %d %s; want 405 with Allow", m, concrete, r.status, r.body)
			}
		}
	}
}
