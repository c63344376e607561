package web

import (
	_ "embed"
	"encoding/json"
	"net/http"
)

// The OpenAPI 3.1 document of the /v1/ API is kept beside the code in two
// files: openapi.json (the paths) and openapi_components.json (the schemas,
// responses and parameters they refer to). The API tests validate every
// request they make and every answer they get against the whole, so it
// says what the handlers do.
var (
	//go:embed openapi.json
	openAPIPaths []byte
	//go:embed openapi_components.json
	openAPIComponents []byte

	openAPI = mergeOpenAPI(openAPIPaths, openAPIComponents)
)

// OpenAPI returns the document GET /v1/openapi.json serves.
func OpenAPI() []byte { return openAPI }

// mergeOpenAPI adds the components file's "components" to the paths file.
// Both are in the repository: a mistake in them fails every API test.
func mergeOpenAPI(paths, components []byte) []byte {
	var doc, comp map[string]json.RawMessage
	if err := json.Unmarshal(paths, &doc); err != nil {
		panic("web: openapi.json: " + err.Error())
	}
	if err := json.Unmarshal(components, &comp); err != nil {
		panic("web: openapi_components.json: " + err.Error())
	}
	doc["components"] = comp["components"]
	b, err := json.Marshal(doc)
	if err != nil {
		panic("web: the OpenAPI document: " + err.Error())
	}
	return b
}

// serveOpenAPI answers GET /v1/openapi.json, which needs no token.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI) // the client went away: nothing to do
}
