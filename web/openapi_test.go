package web_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// GET /v1/openapi.json answers the document in the repository, without a
// token, and it loads as a valid OpenAPI 3.1 document. Another method on
// it is refused like on any endpoint: 401 without the token, 405 with it.
func TestOpenAPIIsServedWithoutToken(t *testing.T) {
	b := setup(t, nil)
	r := b.callAuth(t, "GET", "/v1/openapi.json", nil, nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	var served, paths, comps map[string]any
	for name, v := range map[string]*map[string]any{"openapi.json": &paths, "openapi_components.json": &comps} {
		file, err := os.ReadFile(name)
		if err != nil || json.Unmarshal(file, v) != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	paths["components"] = comps["components"]
	if json.Unmarshal(r.body, &served) != nil || !reflect.DeepEqual(served, paths) {
		t.Fatal("the served document is not openapi.json with openapi_components.json's components")
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
// either side, and passes what keeps it.
func TestContractCatchesMismatches(t *testing.T) {
	t.Parallel()
	c := theContract(t)
	const sub = `{"id":"acme","url":"https://a.test/h","event_types":[],"rate_limit":{"rate":10,"burst":20,"period":"1s"},"max_in_flight":10,"paused":false}`
	const status = `{"subscriber_id":"acme","paused":false,"rate_limit":{"rate":10,"burst":20,"period":"1s"},"max_in_flight":10,` +
		`"cooling_until":%s,"in_flight":0,"counts":{"delivered":1,"retrying":0,"dead":0,"failed":0,"deferred":0},` +
		`"breaker":{"state":"closed","consecutive_failures":0,"failing_since":null,"opened_at":null,"next_probe":null,"last_error_at":null,"slow_start_since":null},` +
		`"effective_rate":{"rate":10,"period":"1s","since":null}}`
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	retry := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"5"}}
	for _, a := range []struct {
		name, method, path string
		status             int
		header             http.Header
		body               string
		ok                 bool
	}{
		{"a subscriber", "GET", "/v1/subscribers/acme", 200, jsonCT, sub, true},
		{"a number as a string", "GET", "/v1/subscribers/acme", 200, jsonCT, strings.Replace(sub, `"max_in_flight":10`, `"max_in_flight":"10"`, 1), false},
		{"an undocumented field", "GET", "/v1/subscribers/acme", 200, jsonCT, strings.Replace(sub, `"paused":false`, `"paused":false,"colour":"red"`, 1), false},
		{"a required field missing", "GET", "/v1/subscribers/acme", 200, jsonCT, strings.Replace(sub, `,"paused":false`, ``, 1), false},
		{"an undocumented status", "GET", "/v1/subscribers/acme", 418, jsonCT, `{"error":{"code":"internal","message":"teapot"}}`, false},
		{"a status another endpoint has", "GET", "/v1/subscribers/acme", 429, retry, `{"error":{"code":"rate_limited","message":"slow down"}}`, false},
		{"not JSON", "GET", "/v1/subscribers/acme", 200, http.Header{"Content-Type": {"text/plain"}}, sub, false},
		{"cooling_until null", "GET", "/v1/subscribers/acme/status", 200, jsonCT, strings.Replace(status, "%s", "null", 1), true},
		{"cooling_until a time", "GET", "/v1/subscribers/acme/status", 200, jsonCT, strings.Replace(status, "%s", `"2026-07-11T08:15:02Z"`, 1), true},
		{"cooling_until a number", "GET", "/v1/subscribers/acme/status", 200, jsonCT, strings.Replace(status, "%s", "5", 1), false},
		{"an unknown breaker state", "GET", "/v1/subscribers/acme/status", 200, jsonCT, strings.Replace(strings.Replace(status, "%s", "null", 1), `"closed"`, `"half-open"`, 1), false},
		{"a 503", "GET", "/v1/subscribers", 503, retry, `{"error":{"code":"redis_unavailable","message":"down"}}`, true},
		{"a 503 without Retry-After", "GET", "/v1/subscribers", 503, jsonCT, `{"error":{"code":"redis_unavailable","message":"down"}}`, false},
		{"a 503 with another status's code", "GET", "/v1/subscribers", 503, retry, `{"error":{"code":"invalid","message":"down"}}`, false},
		{"an error without a message", "GET", "/v1/subscribers", 422, jsonCT, `{"error":{"code":"invalid","field":"limit"}}`, false},
		{"a publish's failed targets", "POST", "/v1/events", 503, retry, `{"error":{"code":"redis_unavailable","message":"down"},"event_id":"e1","targets":[{"subscriber_id":"s","task_id":"s:e1","outcome":"failed"}]}`, true},
		{"an unknown outcome", "POST", "/v1/events", 202, jsonCT, `{"event_id":"e1","targets":[{"subscriber_id":"s","task_id":"s:e1","outcome":"sent"}]}`, false},
		{"the fallback's 404", "GET", "/v1/nothing", 404, jsonCT, `{"error":{"code":"not_found","message":"no endpoint GET /v1/nothing"}}`, true},
		{"a 200 where the fallback answers", "GET", "/v1/nothing", 200, jsonCT, `{}`, false},
		{"the fallback's 405 without Allow", "PATCH", "/v1/subscribers/acme", 405, jsonCT, `{"error":{"code":"method_not_allowed","message":"no"}}`, false},
	} {
		req := httptest.NewRequest(a.method, a.path, nil)
		if err := c.checkAnswer(req, a.status, a.header, []byte(a.body)); (err == nil) != a.ok {
			t.Errorf("answer, %s: %v; want ok=%v", a.name, err, a.ok)
		}
	}

	for _, q := range []struct {
		name, method, path, body string
		auth                     func(*http.Request)
		ok                       bool
	}{
		{"a subscriber", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h","rate_limit":{"rate":1,"burst":1,"period":"1s"}}`, bearer, true},
		{"basic auth", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h"}`, func(r *http.Request) { r.SetBasicAuth("x", token) }, true},
		{"no credentials", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h"}`, nil, false},
		{"an unknown field", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h","urls":[]}`, bearer, false},
		{"a string for a number", "PUT", "/v1/subscribers/acme", `{"url":"https://a.test/h","max_in_flight":"4"}`, bearer, false},
		{"no url", "PUT", "/v1/subscribers/acme", `{}`, bearer, false},
		{"a bad id", "PUT", "/v1/subscribers/a:b", `{"url":"https://a.test/h"}`, bearer, false},
		{"malformed JSON", "PUT", "/v1/subscribers/acme", `{"url":`, bearer, false},
		{"an event", "POST", "/v1/events", `{"id":"e1","type":"t","data":null}`, bearer, true},
		{"an event without data", "POST", "/v1/events", `{"id":"e1","type":"t"}`, bearer, false},
		{"a body where none is taken", "POST", "/v1/subscribers/acme/pause", `{}`, bearer, false},
		{"a rotation without a body", "POST", "/v1/subscribers/acme/secrets/rotate", "", bearer, true},
		{"a limit out of range", "GET", "/v1/subscribers?limit=0", "", bearer, false},
		{"a limit", "GET", "/v1/subscribers?limit=1000&cursor=x", "", bearer, true},
		{"an undocumented method", "PATCH", "/v1/subscribers/acme", "", bearer, false},
		{"an undocumented path", "GET", "/v1/nothing", "", bearer, false},
		{"the document, without a token", "GET", "/v1/openapi.json", "", nil, true},
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
		if err := c.checkRequest(req, body); (err == nil) != q.ok {
			t.Errorf("request, %s: %v; want ok=%v", q.name, err, q.ok)
		}
	}
}

// Every endpoint web/api.go registers is in the document, and every /v1/
// operation of the document is registered there: a new endpoint fails this
// test until it is described.
func TestEveryRouteIsDocumented(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(gotoken.NewFileSet(), "api.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		fn, _ := call.Fun.(*ast.Ident)
		lit, _ := call.Args[0].(*ast.BasicLit)
		if fn == nil || fn.Name != "handle" || lit == nil || lit.Kind != gotoken.STRING {
			return true
		}
		if p, _ := strconv.Unquote(lit.Value); p != "/v1/" { // the fallback
			code = append(code, p)
		}
		return true
	})
	var doc []string
	for _, op := range documentedOperations(theContract(t).doc) {
		if strings.HasPrefix(op.path, "/v1/") {
			doc = append(doc, op.method+" "+op.path)
		}
	}
	slices.Sort(code)
	slices.Sort(doc)
	if len(code) < 10 || !slices.Equal(code, doc) {
		t.Fatalf("api.go registers\n  %s\nopenapi.json documents\n  %s", strings.Join(code, "\n  "), strings.Join(doc, "\n  "))
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

// Every documented operation, called with each of its request examples
// (path parameters from theirs), is served: the answer is documented, is
// not the fallback's, and is not a refusal of the example. Creations go
// first and deletions last, so that the rest finds the example subscriber.
// Every other method on a documented path answers the fallback's 405.
func TestEveryDocumentedOperationIsServed(t *testing.T) {
	b := setup(t, nil)
	doc := theContract(t).doc
	ops := documentedOperations(doc)
	rank := map[string]int{"PUT": 0, "GET": 1, "POST": 1, "DELETE": 2}
	slices.SortStableFunc(ops, func(x, y operation) int { return cmp.Compare(rank[x.method], rank[y.method]) })
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
			if r.status >= 400 {
				code, _ = r.errorOf(t)
			}
			if r.status == 405 || code == "not_found" || r.status == 400 || r.status == 413 || r.status == 422 {
				t.Errorf("%s %s %v: %d %s; want it served and the example accepted", o.method, path, body, r.status, r.body)
			}
		}
	}
	for _, path := range doc.Paths.InMatchingOrder() {
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		concrete := strings.NewReplacer("{id}", "acme", "{task_id}", "acme:e1").Replace(path)
		for _, m := range []string{"GET", "PUT", "POST", "DELETE"} {
			// DELETE /v1/dead-letters/replay is DELETE /v1/dead-letters/{task_id}.
			if doc.Paths.Value(path).GetOperation(m) != nil || m == "DELETE" && path == "/v1/dead-letters/replay" {
				continue
			}
			if r := b.callRaw(t, m, concrete, nil, bearer); r.status != 405 || len(r.header.Values("Allow")) == 0 {
				t.Errorf("%s %s: %d %s; want 405 with Allow", m, concrete, r.status, r.body)
			}
		}
	}
}
