package web_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/web/cli"
)

// batchAnswer is the answer of POST /v1/events/batch, as a client reads it.
type batchAnswer struct {
	Results []struct {
		Status  int    `json:"status"`
		EventID string `json:"event_id"`
		Targets []struct {
			SubscriberID string `json:"subscriber_id"`
			Outcome      string `json:"outcome"`
		} `json:"targets"`
		Note  string `json:"note"`
		Error *struct {
			Code  string `json:"code"`
			Field string `json:"field"`
		} `json:"error"`
	} `json:"results"`
	Failed int `json:"failed"`
}

// said is what each result says: "202 s=enqueued", "409 event_conflict id".
func (a batchAnswer) said() []string {
	var out []string
	for _, r := range a.Results {
		s := strconv.Itoa(r.Status)
		for _, t := range r.Targets {
			s += " " + t.SubscriberID + "=" + t.Outcome
		}
		if r.Note != "" {
			s += " note"
		}
		if r.Error != nil {
			s += " " + r.Error.Code + " " + r.Error.Field
		}
		out = append(out, strings.TrimSpace(s))
	}
	return out
}

// A batch through the API answers each event as POST /v1/events answers
// it alone, in order, bad events included (a wrong JSON type or an
// unknown field in one, an invalid or reserved type, a null field, data
// over the limit, an id reused with other data, an unknown or invalid
// subscriber_id), each writing nothing for itself; the good ones are
// delivered by a real worker; sent again, the batch answers duplicate for
// each event booked and the same errors for the others.
func TestBatchPublishAnswersEachEvent(t *testing.T) {
	b := setup(t, fastRetries)
	sink := testkit.NewSink(t, nil)
	for _, id := range []string{"s", "p"} {
		if r := b.call(t, "PUT", "/v1/subscribers/"+id, map[string]any{"url": sink.URL + "/" + id, "event_types": []string{"video.*"}}); r.status != 201 {
			t.Fatalf("PUT %s: %d %s", id, r.status, r.body)
		}
	}
	if r := b.call(t, "POST", "/v1/subscribers/p/pause", nil); r.status != 200 {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := b.call(t, "POST", "/v1/events", `{"id":"old","type":"video.x","data":1}`); r.status != 202 {
		t.Fatalf("publish old: %d %s", r.status, r.body)
	}
	big := `"` + strings.Repeat("x", 300<<10) + `"`
	entries := []struct{ json, want string }{
		{`{"id":"b1","type":"video.x","data":{"n":1}}`, "202 p=held s=enqueued"},
		{`{"id":"b2","type":5,"data":1}`, "400 bad_json type"},
		{`{"id":"b3","type":"video.x","data":1,"colour":"red"}`, "400 unknown_field colour"},
		{`{"id":"b4","type":"hooklane.ping","data":1}`, "422 invalid type"},
		{`{"id":"b5","type":"video.x","data":1,"not_before":null}`, "422 invalid not_before"},
		{`{"id":"b6","type":"video.x","data":` + big + `}`, "413 payload_too_large data"},
		{`{"id":"old","type":"video.x","data":2}`, "409 event_conflict id"},
		{`{"id":"b7","type":"billing.paid","data":1,"subscriber_id":"nobody"}`, "404 unknown_subscriber"},
		{`{"id":"b8","type":"billing.paid","data":1,"subscriber_id":"a b"}`, "422 invalid subscriber_id"},
		{`{"id":"b9","type":"billing.paid","data":1,"subscriber_id":"s"}`, "202 s=enqueued"},
		{`{"id":"b10","type":"video.x","data":1,"skip_paused":true}`, "202 p=skipped s=enqueued"},
		{`{"id":"b11","type":"nothing.matches","data":1}`, "200 note"},
		{`{"id":"b1","type":"video.x","data":{"n":1}}`, "200 p=duplicate s=duplicate"},
	}
	var body []string
	for _, e := range entries {
		body = append(body, e.json)
	}
	req := `{"events":[` + strings.Join(body, ",") + `]}`
	for round := range 2 {
		r := b.callRaw(t, "POST", "/v1/events/batch", req, bearer) // bad entries: off the contract on purpose
		want := 202
		if round == 1 {
			want = 200
		}
		var ans batchAnswer
		if err := json.Unmarshal(r.body, &ans); r.status != want || err != nil {
			t.Fatalf("round %d: %d %s; want %d", round, r.status, r.body, want)
		}
		got := ans.said()
		if len(got) != len(entries) {
			t.Fatalf("round %d: %d results for %d events: %s", round, len(got), len(entries), r.body)
		}
		failed := 0
		for i, e := range entries {
			w := e.want
			if round == 1 {
				w = strings.NewReplacer("202 ", "200 ", "=enqueued", "=duplicate", "=held", "=duplicate").Replace(w)
			}
			if got[i] != w {
				t.Errorf("round %d, event %d: %q; want %q", round, i, got[i], w)
			}
			if strings.Contains(w, "_") || strings.Contains(w, "invalid") {
				failed++
			}
			// Exactly what POST /v1/events answers for it alone (sent
			// after the batch: a duplicate or the same refusal).
			if !strings.Contains(e.json, big) {
				one := b.callRaw(t, "POST", "/v1/events", e.json, bearer)
				if w := strings.Fields(got[i])[0]; round == 1 && strconv.Itoa(one.status) != w {
					t.Errorf("event %d alone: %d %s; the batch said %s", i, one.status, one.body, got[i])
				}
			}
		}
		if ans.Failed != failed {
			t.Errorf("round %d: failed %d; want %d", round, ans.Failed, failed)
		}
	}
	// What was refused wrote nothing.
	for _, id := range []string{"b2", "b3", "b4", "b5", "b6", "b7", "b8"} {
		if r := b.call(t, "GET", "/v1/events/"+id, nil); r.status != 404 {
			t.Errorf("refused event %s: GET %d %s; want 404", id, r.status, r.body)
		}
	}
	// The accepted ones are delivered: b1, b9, b10 to s (p is paused),
	// with the event published before.
	testkit.Eventually(t, 10*time.Second, "4 deliveries", func() bool { return sink.Count() >= 4 })
	got := map[string]bool{}
	for _, a := range sink.Got() {
		got[a.ID] = true
	}
	if len(got) != 4 || !got["b1"] || !got["b9"] || !got["b10"] || !got["old"] || sink.Count() != 4 {
		t.Errorf("delivered %v (%d requests); want old, b1, b9 and b10 once each", got, sink.Count())
	}
}

// The call itself is refused whole, nothing written, when its body is not
// one JSON object {"events": [...]} of 1 to 100 entries within 4 MiB: a
// valid first event in it is not published.
func TestBatchPublishRefusedWhole(t *testing.T) {
	b := setup(t, nil)
	if r := b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "https://a.test/h"}); r.status != 201 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	good := `{"id":"w1","type":"t","data":1}`
	many := strings.TrimSuffix(strings.Repeat(good+",", producer.MaxBatch+1), ",")
	big := `{"id":"w1","type":"t","data":"` + strings.Repeat("x", 200<<10) + `"}`
	for _, c := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"malformed", `{"events":[` + good + `,{"id":]}`, 400, "bad_json"},
		{"trailing data", `{"events":[` + good + `]} x`, 400, "bad_json"},
		{"not an object", `[` + good + `]`, 400, "bad_json"},
		{"events not an array", `{"events":` + good + `}`, 400, "bad_json"},
		{"unknown field", `{"events":[` + good + `],"atomic":true}`, 400, "unknown_field"},
		{"empty", `{"events":[]}`, 422, "invalid"},
		{"no events", `{}`, 422, "invalid"},
		{"null events", `{"events":null}`, 422, "invalid"},
		{"over 100", `{"events":[` + many + `]}`, 422, "invalid"},
		{"over 4 MiB", `{"events":[` + strings.TrimSuffix(strings.Repeat(big+",", 21), ",") + `]}`, 413, "body_too_large"},
	} {
		r := b.callRaw(t, "POST", "/v1/events/batch", c.body, bearer)
		if code, _ := r.errorOf(t); r.status != c.status || code != c.code {
			t.Errorf("%s: %d %s; want %d %s", c.name, r.status, r.body, c.status, c.code)
		}
	}
	if r := b.call(t, "GET", "/v1/events/w1", nil); r.status != 404 {
		t.Errorf("w1 after refused batches: %d %s; want 404 (nothing written)", r.status, r.body)
	}
}

// A batch of N counts N events against the token's ingest rate, all or
// nothing: past it the call is a 429 with a Retry-After and writes
// nothing; a batch over the burst is refused as such (422); sent again
// after the Retry-After, the refused batch is published.
func TestBatchPublishCountsEachEventAgainstTheIngestRate(t *testing.T) {
	t.Parallel()
	s, err := web.New(web.Config{Token: token, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: testkit.Namespace("bingest"),
		Logger: quiet, IngestRate: 5, IngestBurst: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	b := &bundle{srv: newServer(t, s.Handler())}
	if r := b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "https://a.test/h"}); r.status != 201 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	batch := func(prefix string, n int) map[string]any {
		evs := make([]map[string]any, n)
		for i := range evs {
			evs[i] = map[string]any{"id": fmt.Sprintf("%s%d", prefix, i), "type": "t", "data": i}
		}
		return map[string]any{"events": evs}
	}
	if r := b.call(t, "POST", "/v1/events/batch", batch("a", 8)); r.status != 202 {
		t.Fatalf("8 of a burst of 10: %d %s", r.status, r.body)
	}
	r := b.call(t, "POST", "/v1/events/batch", batch("b", 8))
	if code, _ := r.errorOf(t); r.status != 429 || code != "rate_limited" || r.header.Get("Retry-After") == "" {
		t.Fatalf("8 more: %d %v %s; want 429 rate_limited with a Retry-After", r.status, r.header, r.body)
	}
	if r := b.call(t, "GET", "/v1/events/b0", nil); r.status != 404 {
		t.Fatalf("b0 of the refused batch: %d %s; want 404 (nothing written)", r.status, r.body)
	}
	r = b.call(t, "POST", "/v1/events/batch", batch("c", 11))
	if code, field := r.errorOf(t); r.status != 422 || code != "invalid" || field != "events" {
		t.Fatalf("11 over a burst of 10: %d %s; want 422 invalid events", r.status, r.body)
	}
	ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
	var again response
	testkit.Eventually(t, time.Duration(ra+5)*time.Second, "the refused batch accepted", func() bool {
		again = b.call(t, "POST", "/v1/events/batch", batch("b", 8))
		return again.status != http.StatusTooManyRequests
	})
	var ans batchAnswer
	// booked anew, not a duplicate: handed to asynq, or parked for a turn
	// (once BatchAfter of s's wait in asynq, with no worker)
	if err := json.Unmarshal(again.body, &ans); again.status != 202 || err != nil || ans.Failed != 0 ||
		ans.said()[0] != "202 s=enqueued" && ans.said()[0] != "202 s=scheduled" {
		t.Fatalf("the refused batch again: %d %s; want each event booked anew (the refusal wrote nothing)", again.status, again.body)
	}
}

// eventsFile writes n events of type t, ids prefix000 on, as JSON Lines to
// a file of the test's; it returns its path and its lines.
func eventsFile(t *testing.T, prefix string, n int) (string, []string) {
	t.Helper()
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"id":"%s%03d","type":"t","data":{"n":%d}}`, prefix, i, i))
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, lines
}

// hooklane publish -file reads events from a file as JSON Lines, or from
// stdin as a JSON array, and sends them 100 to a call: 150 events are two
// calls, answered as one list in file order; the file sent again answers
// duplicate for each. -file with another flag is a usage error.
func TestCLIPublishFile(t *testing.T) {
	b := setup(t, nil)
	if r := b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "https://a.test/h"}); r.status != 201 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	path, lines := eventsFile(t, "f", 150)
	for round, want := range []string{"202 s=enqueued", "200 s=duplicate"} {
		var ans batchAnswer
		if err := b.cli(t, &ans, "publish", "-file", path); err != nil {
			t.Fatal(err)
		}
		// Past the subscriber's burst the truth is scheduled (behind its rate).
		last := ans.said()[149]
		if len(ans.Results) != 150 || ans.Failed != 0 || ans.said()[0] != want || (last != want && last != strings.Replace(want, "enqueued", "scheduled", 1)) || ans.Results[149].EventID != "f149" {
			t.Fatalf("round %d: %d results, %d failed, first %v; want 150 in file order, each %q", round, len(ans.Results), ans.Failed, ans.said()[:1], want)
		}
	}
	var out bytes.Buffer
	c := cli.FromEnv(func(k string) string {
		return map[string]string{"HOOKLANE_URL": b.srv.URL, "HOOKLANE_API_TOKEN": token}[k]
	})
	c.HTTP.Transport = checked{t: t, next: b.srv.Client().Transport}
	stdin := strings.NewReader(` [` + strings.Join(lines[:2], ",") + `, {"id":"g1","type":"t","data":null}]`)
	if err := cli.RunIO(t.Context(), c, []string{"publish", "-file", "-"}, stdin, &out); err != nil {
		t.Fatal(err)
	}
	var ans batchAnswer
	if err := json.Unmarshal(out.Bytes(), &ans); err != nil || !slices.Contains([]string{"[200 s=duplicate 200 s=duplicate 202 s=enqueued]", "[200 s=duplicate 200 s=duplicate 202 s=scheduled]"}, fmt.Sprint(ans.said())) {
		t.Fatalf("stdin: %s, %v", out.String(), err)
	}
	if err := b.cli(t, nil, "publish", "-file", path, "-type", "t"); !errors.Is(err, cli.ErrUsage) {
		t.Fatalf("-file with -type: %v; want a usage error", err)
	}
}

// hooklane publish -file with more events than the token's burst waits
// out each 429's Retry-After and sends the same batch again: all 250
// events of a token allowed 100 a second, 100 at once, are published, in
// file order, none failed (the refused calls wrote nothing: none
// answers duplicate).
func TestCLIPublishFileWaitsOutTheRate(t *testing.T) {
	b := setupWith(t, nil, func(c *web.Config) { c.IngestRate, c.IngestBurst = 100, 100 })
	if r := b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "https://a.test/h"}); r.status != 201 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	path, _ := eventsFile(t, "w", 250)
	var ans batchAnswer
	if err := b.cli(t, &ans, "publish", "-file", path); err != nil {
		t.Fatalf("publish -file of 250 events at 100/s: %v", err)
	}
	if len(ans.Results) != 250 || ans.Failed != 0 {
		t.Fatalf("%d results, %d failed; want 250, none failed", len(ans.Results), ans.Failed)
	}
	for i, said := range ans.said() {
		if ans.Results[i].EventID != fmt.Sprintf("w%03d", i) || said != "202 s=enqueued" && said != "202 s=scheduled" {
			t.Fatalf("result %d: %s %s; want w%03d booked anew", i, ans.Results[i].EventID, said, i)
		}
	}
}
