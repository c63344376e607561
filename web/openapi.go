package web

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 document of the /v1/ API, kept beside the
// code in openapi.json. The API tests validate every request they make and
// every answer they get against it, so it says what the handlers do.
//
//go:embed openapi.json
var openAPI []byte

// serveOpenAPI answers GET /v1/openapi.json, which needs no token.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI) // the client went away: nothing to do
}
