package web

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"strings"
)

// openAPIFile is the OpenAPI 3.1 document of the /v1/ API, kept beside the
// code in one file. The API tests validate every request they make and
// every answer they get against the document served (openAPI), so it says
// what the handlers do.
//
//go:embed openapi.json
var openAPIFile []byte

// openAPI is the document served: the file, with each resource path under
// /v1/ described again under /v1/tenants/{tenant}/ (tenantRoutes), where
// it may also answer 404 unknown_tenant. Built once, from the file alone.
var openAPI = withTenantPaths(openAPIFile)

// OpenAPI returns the document GET /v1/openapi.json serves.
func OpenAPI() []byte { return openAPI }

// serveOpenAPI answers GET /v1/openapi.json, which needs no token.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI) // the client went away: nothing to do
}

// withTenantPaths is doc with every path /v1/<rest> but the document's
// own and the tenants' also as /v1/tenants/{tenant}/<rest>: its tenant
// parameter first, each operation's id suffixed "ForTenant", and its 404
// answer either its own or UnknownTenant. A document that is not what
// this expects is a build error, caught by every test: it panics.
func withTenantPaths(doc []byte) []byte {
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		panic("web/openapi.json: " + err.Error())
	}
	paths := d["paths"].(map[string]any)
	responses := d["components"].(map[string]any)["responses"].(map[string]any)
	unknownTenant := map[string]any{"$ref": "#/components/responses/UnknownTenant"}
	var add = map[string]any{}
	for path, item := range paths {
		rest, ok := strings.CutPrefix(path, "/v1/")
		if !ok || rest == "openapi.json" || strings.HasPrefix(rest, "tenants") {
			continue
		}
		var c map[string]any
		b, _ := json.Marshal(item) // a copy
		_ = json.Unmarshal(b, &c)
		params, _ := c["parameters"].([]any)
		c["parameters"] = append([]any{map[string]any{"$ref": "#/components/parameters/TenantName"}}, params...)
		for _, m := range []string{"get", "put", "post", "delete"} {
			op, ok := c[m].(map[string]any)
			if !ok {
				continue
			}
			op["operationId"] = op["operationId"].(string) + "ForTenant"
			rs := op["responses"].(map[string]any)
			own, ok := rs["404"].(map[string]any)
			if !ok {
				rs["404"] = unknownTenant
				continue
			}
			if ref, ok := own["$ref"].(string); ok {
				own = responses[strings.TrimPrefix(ref, "#/components/responses/")].(map[string]any)
			}
			schema := own["content"].(map[string]any)["application/json"].(map[string]any)["schema"]
			rs["404"] = map[string]any{
				"description": own["description"].(string) + " Or no tenant has that name.",
				"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{
					"anyOf": []any{schema, map[string]any{"$ref": "#/components/schemas/UnknownTenantError"}}}}},
			}
		}
		add["/v1/tenants/{tenant}/"+rest] = c
	}
	for p, item := range add {
		paths[p] = item
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		panic("web/openapi.json: " + err.Error())
	}
	return append(out, '\n')
}
