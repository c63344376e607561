package web_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
)

// GET /v1/subscribers pages in id order with an opaque cursor: every
// subscriber once, none twice; a cursor it did not answer and a bad limit
// are 422; the client (and so the CLI) follows the pages to the end.
func TestSubscriberListPages(t *testing.T) {
	b := setup(t, nil)
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("s%d", i)
		want = append(want, id)
		if r := b.call(t, "PUT", "/v1/subscribers/"+id, map[string]any{"url": "https://a.test/h"}); r.status != 201 {
			t.Fatalf("PUT %s: %d %s", id, r.status, r.body)
		}
	}
	var got []string
	cursor, pages := "", 0
	for {
		path := "/v1/subscribers?limit=2"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := b.call(t, "GET", path, nil)
		var page struct {
			Subscribers []struct{ ID string }
			NextCursor  string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil || r.status != 200 || len(page.Subscribers) > 2 {
			t.Fatalf("page %d: %d %s (%v)", pages, r.status, r.body, err)
		}
		for _, s := range page.Subscribers {
			got = append(got, s.ID)
		}
		pages++
		if page.NextCursor == "" || pages > 5 {
			break
		}
		if page.NextCursor == "s4" || page.NextCursor == "s1" || page.NextCursor == "s3" {
			t.Fatalf("cursor %q is a bare id, not opaque", page.NextCursor)
		}
		cursor = page.NextCursor
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || pages != 3 {
		t.Fatalf("paged %v in %d pages; want %v in 3", got, pages, want)
	}
	for _, bad := range []string{"?cursor=s3", "?cursor=xyz", "?limit=0", "?limit=1001", "?limit=ten"} {
		r := b.callRaw(t, "GET", "/v1/subscribers"+bad, nil, bearer) // the limits are off the contract too
		if code, _ := r.errorOf(t); r.status != 422 || code != "invalid" {
			t.Errorf("GET /v1/subscribers%s: %d %s; want 422 invalid", bad, r.status, r.body)
		}
	}
	if r := b.call(t, "GET", "/v1/subscribers", nil); len(r.json(t)["subscribers"].([]any)) != 5 {
		t.Errorf("default page: %s; want all 5 (default limit 100)", r.body)
	}
}
