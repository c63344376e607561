package web_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/hooklane/hooklane/web"
)

// Every example in openapi.json is valid against the schema it
// illustrates: request bodies', answers', parameters' and headers' (as
// example or examples), and each schema's own example and examples. A
// reader copies them, and TestEveryDocumentedOperationIsServed sends the
// request ones, so a wrong one misleads; the test names where it is.
func TestEveryExampleValidates(t *testing.T) {
	t.Parallel()
	doc := loadDocument(t)
	checked, problems := exampleProblems(doc)
	for _, p := range problems {
		t.Error(p)
	}
	// Not vacuous: the document has examples of every kind, and the walk
	// reaches them.
	for kind, least := range map[string]int{"request": 8, "response": 40, "parameter": 3, "header": 3, "schema": 8} {
		if checked[kind] < least {
			t.Errorf("checked %d %s examples; the document has at least %d", checked[kind], kind, least)
		}
	}

	// Each kind of example, broken in a copy of the document, fails the
	// check by its path.
	for _, c := range []struct {
		name, where string
		breakIt     func(doc *openapi3.T)
	}{
		{"a request body's", "#/paths/~1v1~1subscribers~1{id}/put/requestBody/content/application~1json/examples/full", func(doc *openapi3.T) {
			ex := doc.Paths.Value("/v1/subscribers/{id}").Put.RequestBody.Value.Content.Get("application/json").Examples["full"]
			ex.Value.Value.(map[string]any)["max_in_flight"] = "4"
		}},
		{"an answer's", "#/paths/~1v1~1events~1{id}/get/responses/200/content/application~1json/examples/example", func(doc *openapi3.T) {
			ex := doc.Paths.Value("/v1/events/{id}").Get.Responses.Status(200).Value.Content.Get("application/json").Examples["example"]
			delete(ex.Value.Value.(map[string]any), "published_at")
		}},
		{"a parameter's", "#/paths/~1v1~1subscribers/get/parameters/0/example", func(doc *openapi3.T) {
			doc.Paths.Value("/v1/subscribers").Get.Parameters[0].Value.Example = 1001.0
		}},
		{"a header's", "#/components/headers/Retry-After/example", func(doc *openapi3.T) {
			doc.Components.Headers["Retry-After"].Value.Example = 0.0
		}},
		{"a schema's examples", "#/components/schemas/RateLimit/examples/0", func(doc *openapi3.T) {
			doc.Components.Schemas["RateLimit"].Value.Examples[0].(map[string]any)["period"] = "a second"
		}},
		{"a schema's example", "#/components/schemas/Counts/properties/dead/example", func(doc *openapi3.T) {
			doc.Components.Schemas["Counts"].Value.Properties["dead"].Value.Example = -1.0
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := loadDocument(t) // a copy of its own to break
			c.breakIt(doc)
			_, problems := exampleProblemsAt(doc, c.where)
			named := slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, c.where+": ") })
			if !named {
				t.Errorf("broke the example at %s; the check said %q", c.where, problems)
			}
		})
	}
}

// loadDocument loads a fresh copy of openapi.json.
func loadDocument(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(web.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// exampleProblems validates every example of doc against its schema, with
// JSON Schema 2020-12 as OpenAPI 3.1 says, and returns how many of each
// kind it checked and what is wrong, each prefixed with the example's
// JSON pointer. A component reached through a $ref is checked where it
// is defined, and again where it is used when the schema there differs.
func exampleProblems(doc *openapi3.T) (checked map[string]int, problems []string) {
	return exampleProblemsAt(doc, "")
}

// exampleProblemsAt is exampleProblems validating only the example at
// pointer only ("" every one): the walk still goes everywhere, so an
// example it does not reach is not checked, and the check fails.
func exampleProblemsAt(doc *openapi3.T, only string) (checked map[string]int, problems []string) {
	w := &exampleWalk{checked: map[string]int{}, seen: map[*openapi3.Schema]bool{}, only: only}
	comp := doc.Components
	for _, name := range slices.Sorted(maps.Keys(comp.Schemas)) {
		w.schema("#/components/schemas/"+ptr(name), comp.Schemas[name])
	}
	for _, name := range slices.Sorted(maps.Keys(comp.Parameters)) {
		w.parameter("#/components/parameters/"+ptr(name), comp.Parameters[name].Value)
	}
	for _, name := range slices.Sorted(maps.Keys(comp.Headers)) {
		w.header("#/components/headers/"+ptr(name), comp.Headers[name].Value)
	}
	for _, name := range slices.Sorted(maps.Keys(comp.RequestBodies)) {
		w.content("#/components/requestBodies/"+ptr(name)+"/content", comp.RequestBodies[name].Value.Content, "request")
	}
	for _, name := range slices.Sorted(maps.Keys(comp.Responses)) {
		w.response("#/components/responses/"+ptr(name), comp.Responses[name].Value)
	}
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		at := "#/paths/" + ptr(path)
		for i, p := range item.Parameters {
			w.parameter(fmt.Sprintf("%s/parameters/%d", at, i), p.Value)
		}
		for _, method := range slices.Sorted(maps.Keys(item.Operations())) {
			op := item.GetOperation(method)
			at := at + "/" + strings.ToLower(method)
			for i, p := range op.Parameters {
				w.parameter(fmt.Sprintf("%s/parameters/%d", at, i), p.Value)
			}
			if rb := op.RequestBody; rb != nil {
				w.content(at+"/requestBody/content", rb.Value.Content, "request")
			}
			for _, status := range slices.Sorted(maps.Keys(op.Responses.Map())) {
				w.response(at+"/responses/"+status, op.Responses.Map()[status].Value)
			}
		}
	}
	return w.checked, w.problems
}

type exampleWalk struct {
	checked  map[string]int
	problems []string
	seen     map[*openapi3.Schema]bool // each schema's own examples once
	only     string                    // validate only the example at this pointer, if set
}

// ptr escapes a JSON pointer token.
func ptr(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

// check validates one example value against schema.
func (w *exampleWalk) check(at, kind string, schema *openapi3.SchemaRef, value any) {
	w.checked[kind]++
	if w.only != "" && at != w.only {
		return
	}
	if schema == nil || schema.Value == nil {
		w.problems = append(w.problems, at+": an example without a schema to check it against")
		return
	}
	opts := []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()}
	switch kind {
	case "request", "parameter":
		opts = append(opts, openapi3.VisitAsRequest())
	case "response", "header":
		opts = append(opts, openapi3.VisitAsResponse())
	}
	if err := schema.Value.VisitJSON(value, opts...); err != nil {
		w.problems = append(w.problems, fmt.Sprintf("%s: %v", at, err))
	}
}

// examples checks a parameter's, header's or media type's example and
// examples against its schema.
func (w *exampleWalk) examples(at, kind string, schema *openapi3.SchemaRef, example any, examples openapi3.Examples) {
	if example != nil {
		w.check(at+"/example", kind, schema, example)
	}
	for _, name := range slices.Sorted(maps.Keys(examples)) {
		if ex := examples[name]; ex.Value != nil && ex.Value.Value != nil {
			w.check(at+"/examples/"+ptr(name), kind, schema, ex.Value.Value)
		}
	}
}

func (w *exampleWalk) parameter(at string, p *openapi3.Parameter) {
	w.examples(at, "parameter", p.Schema, p.Example, p.Examples)
	w.content(at+"/content", p.Content, "parameter")
	w.schema(at+"/schema", p.Schema)
}

func (w *exampleWalk) header(at string, h *openapi3.Header) {
	w.examples(at, "header", h.Schema, h.Example, h.Examples)
	w.content(at+"/content", h.Content, "header")
	w.schema(at+"/schema", h.Schema)
}

func (w *exampleWalk) response(at string, r *openapi3.Response) {
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		w.header(at+"/headers/"+ptr(name), r.Headers[name].Value)
	}
	w.content(at+"/content", r.Content, "response")
}

func (w *exampleWalk) content(at string, c openapi3.Content, kind string) {
	for _, mediaType := range slices.Sorted(maps.Keys(c)) {
		mt := c[mediaType]
		at := at + "/" + ptr(mediaType)
		w.examples(at, kind, mt.Schema, mt.Example, mt.Examples)
		w.schema(at+"/schema", mt.Schema)
	}
}

// schema checks the example and examples of s and of every schema in it.
func (w *exampleWalk) schema(at string, ref *openapi3.SchemaRef) {
	if ref == nil || ref.Value == nil || w.seen[ref.Value] {
		return
	}
	s := ref.Value
	w.seen[s] = true
	if s.Example != nil {
		w.check(at+"/example", "schema", ref, s.Example)
	}
	for i, ex := range s.Examples {
		w.check(fmt.Sprintf("%s/examples/%d", at, i), "schema", ref, ex)
	}
	for _, group := range []struct {
		name string
		refs openapi3.SchemaRefs
	}{{"allOf", s.AllOf}, {"anyOf", s.AnyOf}, {"oneOf", s.OneOf}, {"prefixItems", s.PrefixItems}} {
		for i, sub := range group.refs {
			w.schema(fmt.Sprintf("%s/%s/%d", at, group.name, i), sub)
		}
	}
	for _, group := range []struct {
		name    string
		schemas openapi3.Schemas
	}{{"properties", s.Properties}, {"patternProperties", s.PatternProperties}, {"dependentSchemas", s.DependentSchemas}, {"$defs", s.Defs}} {
		for _, name := range slices.Sorted(maps.Keys(group.schemas)) {
			w.schema(at+"/"+group.name+"/"+ptr(name), group.schemas[name])
		}
	}
	one := map[string]*openapi3.SchemaRef{
		"items": s.Items, "not": s.Not, "contains": s.Contains, "propertyNames": s.PropertyNames,
		"if": s.If, "then": s.Then, "else": s.Else, "additionalProperties": s.AdditionalProperties.Schema,
		"unevaluatedProperties": s.UnevaluatedProperties.Schema, "unevaluatedItems": s.UnevaluatedItems.Schema,
	}
	for _, name := range slices.Sorted(maps.Keys(one)) {
		w.schema(at+"/"+name, one[name])
	}
}
