package web_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/hooklane/hooklane/web"
)

// FuzzAPIRequests sends arbitrary bodies to the endpoints that decode JSON,
// through the real handler and a real Redis. Whatever the body, the answer
// is a JSON object with a status from the documented set, and an error
// answer names its code and message: no 500, no panic, no half-written
// state the next request trips on.
func FuzzAPIRequests(f *testing.F) {
	for _, seed := range []string{
		`{"url":"https://a.test/h","event_types":["video.*"],"rate_limit":{"rate":10,"burst":20,"period":"1s"},"max_in_flight":4}`,
		`{"url":"https://a.test/h","secrets":["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}`,
		`{"id":"evt_1","type":"video.trending","data":{"v":1},"not_before":"2030-01-01T00:00:00Z"}`,
		`{"id":"evt_1","type":"t","data":1,"subscriber_id":"nobody"}`,
		`{"subscriber":"s","ids":["s:e1"]}`,
		`{"grace":"24h"}`, `{"rate_limit":{"period":"-1s"}}`, `{}`, `[]`, `null`, `{"url":1}`, `{"id":"a"} {}`, "",
	} {
		for _, path := range []string{"PUT /v1/subscribers/fz", "POST /v1/events", "POST /v1/dead-letters/replay", "POST /v1/subscribers/fz/secrets/rotate"} {
			f.Add(path, []byte(seed))
		}
	}
	s, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: token, RedisURL: redisSrv.URL, Namespace: "fuzz", Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	allowed := []int{200, 201, 202, 204, 400, 404, 409, 413, 422, 503}
	f.Fuzz(func(t *testing.T, route string, body []byte) {
		method, path, ok := bytes.Cut([]byte(route), []byte(" "))
		if !ok || !slices.Contains([]string{"PUT /v1/subscribers/fz", "POST /v1/events", "POST /v1/dead-letters/replay",
			"POST /v1/subscribers/fz/secrets/rotate"}, route) {
			t.Skip()
		}
		req := httptest.NewRequest(string(method), string(path), bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !slices.Contains(allowed, rec.Code) {
			t.Fatalf("%s %q: status %d: %s", route, body, rec.Code, rec.Body)
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
	})
}
