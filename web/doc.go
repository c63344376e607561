// Package web is hooklane's HTTP process: the JSON API under /v1/ (over
// package producer, which makes every write), the operator's console under
// /console/ (server-rendered pages, console*.go and console/), the upstream
// asynqmon UI under /monitoring/, Prometheus metrics under /metrics, and
// /healthz, /readyz.
// The API's OpenAPI 3.1 document is the one file openapi.json, served as
// it is at /v1/openapi.json without a token.
//
// Every other /v1/ and every /console/ and /monitoring/ request carries Config.Token, as
// a bearer token or as the password of HTTP basic auth so that a browser can
// open the UI. The API's Go client and the operator CLI built on it are in
// web/cli; the one-process demo that `make run` starts is in web/dev.
package web
