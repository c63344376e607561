package web

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 document of the /v1/ API, kept beside the code
// in one file and served byte for byte as it is in the repository. The API
// tests validate every request they make and every answer they get against
// it, so it says what the handlers do.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the document GET /v1/openapi.json serves.
func OpenAPI() []byte { return openAPI }

// serveOpenAPI answers GET /v1/openapi.json, which needs no token.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI) // the client went away: nothing to do
}
