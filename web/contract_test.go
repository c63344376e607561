package web_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/hooklane/hooklane/web"
)

// The API's contract is openapi.json. Every request the API tests make
// through bundle.call, bundle.callAuth and the CLI, and every answer they
// get, is validated against it by kin-openapi's openapi3filter (JSON
// Schema 2020-12 for an OpenAPI 3.1 document), so that it cannot drift from
// the handlers: a field, status, header or endpoint it does not describe
// fails the test that met it.

// contract is the document (openapi.json), loaded and validated once.
type contract struct {
	doc    *openapi3.T
	router routers.Router
}

var loadContract = sync.OnceValues(func() (*contract, error) {
	doc, err := openapi3.NewLoader().LoadFromData(web.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	// Validate checks the document, its examples included, against the
	// OpenAPI 3.1 rules and its own schemas.
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	return &contract{doc: doc, router: router}, nil
})

func theContract(t testing.TB) *contract {
	t.Helper()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// options: strict both ways. An answer whose status the operation does not
// list fails; so does a body sent to an operation that takes none. Defaults
// are never written into the request.
var options = func() *openapi3filter.Options {
	o := &openapi3filter.Options{
		IncludeResponseStatus:             true,
		RejectWhenRequestBodyNotSpecified: true,
		SkipSettingDefaults:               true,
		MultiError:                        true,
		AuthenticationFunc:                presentsCredentials,
	}
	// Where and why, without the schema it quotes in full.
	o.WithCustomSchemaErrorFunc(func(e *openapi3.SchemaError) string {
		return fmt.Sprintf("at /%s: %s", strings.Join(e.JSONPointer(), "/"), e.Reason)
	})
	return o
}()

// presentsCredentials checks that a request presents a token as the
// security scheme says; whether it is the right one is the server's
// business (a 401 is a documented answer).
func presentsCredentials(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r := in.RequestValidationInput.Request
	switch in.SecurityScheme.Scheme {
	case "bearer":
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if ok && strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(tok) != "" {
			return nil
		}
		return errors.New("no bearer token")
	case "basic":
		if _, _, ok := r.BasicAuth(); ok {
			return nil
		}
		return errors.New("no basic credentials")
	}
	return fmt.Errorf("security scheme %q unknown to the tests", in.SecurityScheme.Scheme)
}

// inAPI reports whether the contract covers path: all of /v1/, and the
// health checks it documents; not /metrics or /monitoring/.
func (c *contract) inAPI(path string) bool {
	return strings.HasPrefix(path, "/v1/") || c.doc.Paths.Find(path) != nil
}

// checkRequest validates req, whose body is body (nil for none), and
// returns what is wrong with it.
func (c *contract) checkRequest(req *http.Request, body []byte) error {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("not in openapi.json: %w", err)
	}
	v := req.Clone(req.Context()) // validation reads the body: give it its own
	if body != nil {
		v.Body = io.NopCloser(bytes.NewReader(body))
	}
	return openapi3filter.ValidateRequest(context.Background(),
		&openapi3filter.RequestValidationInput{Request: v, PathParams: params, Route: route, Options: options})
}

// checkAnswer validates the answer (status, header, body) to req and
// returns what is wrong with it. An undocumented /v1/ request is answered
// by the API's fallback, which the document describes in its
// Unauthorized, NotFound and MethodNotAllowed responses.
func (c *contract) checkAnswer(req *http.Request, status int, header http.Header, body []byte) error {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		route, params = c.fallback(req, err), nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: options},
		Status:                 status,
		Header:                 header,
		Options:                options,
	}
	return openapi3filter.ValidateResponse(context.Background(), in.SetBodyBytes(body))
}

// fallback is the operation the API answers a request the document does
// not list with: 404 for an unknown path, 405 for a known path's other
// method; the token is checked first.
func (c *contract) fallback(req *http.Request, notFound error) *routers.Route {
	r := c.doc.Components.Responses
	answers := []openapi3.NewResponsesOption{openapi3.WithStatus(http.StatusUnauthorized, r["Unauthorized"])}
	if errors.Is(notFound, routers.ErrMethodNotAllowed) {
		answers = append(answers, openapi3.WithStatus(http.StatusMethodNotAllowed, r["MethodNotAllowed"]))
	} else {
		answers = append(answers, openapi3.WithStatus(http.StatusNotFound, r["NotFound"]))
	}
	return &routers.Route{Spec: c.doc, Path: req.URL.Path, PathItem: &openapi3.PathItem{}, Method: req.Method,
		Operation: &openapi3.Operation{Responses: openapi3.NewResponses(answers...)}}
}

// checkAnswer fails t when the answer to req breaks the contract.
func checkAnswer(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	c := theContract(t)
	if !c.inAPI(req.URL.Path) {
		return
	}
	if err := c.checkAnswer(req, status, header, body); err != nil {
		t.Errorf("contract: the %d answer to %s %s: %v\n%s", status, req.Method, req.URL.RequestURI(), err, body)
	}
}

// checkedClient is an HTTP client that validates what it sends and gets.
func checkedClient(t testing.TB) *http.Client {
	return &http.Client{Transport: checked{t: t, next: http.DefaultTransport}}
}

// checked is an http.RoundTripper that validates every API request and
// its answer against the contract, failing t on a mismatch.
type checked struct {
	t    testing.TB
	next http.RoundTripper
	// raw marks a request deliberately off the contract (malformed JSON,
	// an unknown field, a value out of range, no credentials, an
	// undocumented path): its answer is still checked, the request is not.
	raw bool
}

func (ck checked) RoundTrip(req *http.Request) (*http.Response, error) {
	c := theContract(ck.t)
	if !c.inAPI(req.URL.Path) {
		return ck.next.RoundTrip(req)
	}
	var body []byte
	send := req
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		send = req.Clone(req.Context())
		send.Body = io.NopCloser(bytes.NewReader(body))
	}
	if !ck.raw {
		if err := c.checkRequest(req, body); err != nil {
			ck.t.Errorf("contract: request %s %s: %v\n%s", req.Method, req.URL.RequestURI(), err, body)
		}
	}
	resp, err := ck.next.RoundTrip(send)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	checkAnswer(ck.t, req, resp.StatusCode, resp.Header, b)
	return resp, nil
}
