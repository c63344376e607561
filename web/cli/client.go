package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// Client calls the /v1/ API of a hooklane web process. Its errors are
// *web.APIError for any answer that is not 2xx.
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:8080
	Token   string
	HTTP    *http.Client
	// Tenant, when set, sends every call to that tenant's routes
	// (/v1/tenants/{tenant}/…) instead of the default tenant's.
	Tenant string
}

// NewClient returns a Client with a 30s timeout per call.
func NewClient(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimSuffix(baseURL, "/"), Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// do sends body as JSON (when not nil) and decodes a 2xx answer into out
// (when not nil). It returns the status.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	if rest, ok := strings.CutPrefix(path, "/v1/"); ok && c.Tenant != "" {
		path = "/v1/tenants/" + url.PathEscape(c.Tenant) + "/" + rest
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error *web.APIError }
		if json.Unmarshal(b, &e) != nil || e.Error == nil {
			return resp.StatusCode, &web.APIError{Status: resp.StatusCode, Code: "http_error", Message: strings.TrimSpace(string(b))}
		}
		e.Error.Status = resp.StatusCode
		if ra, ok := limits.ReadRetryAfter(resp.Header.Get("Retry-After")); ok {
			e.Error.RetryAfter = time.Until(ra.Deadline(time.Now(), time.Hour))
		}
		return resp.StatusCode, e.Error
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: answer unreadable: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func subPath(id string) string { return "/v1/subscribers/" + url.PathEscape(id) }

// PutSubscriber creates or replaces subscriber id.
func (c *Client) PutSubscriber(ctx context.Context, id string, r web.SubscriberRequest) (web.Subscriber, error) {
	var s web.Subscriber
	_, err := c.do(ctx, "PUT", subPath(id), r, &s)
	return s, err
}

// GetSubscriber returns subscriber id, without secrets.
func (c *Client) GetSubscriber(ctx context.Context, id string) (web.Subscriber, error) {
	var s web.Subscriber
	_, err := c.do(ctx, "GET", subPath(id), nil, &s)
	return s, err
}

// ListSubscribers returns every subscriber, by id, page after page.
func (c *Client) ListSubscribers(ctx context.Context) ([]web.Subscriber, error) {
	var all []web.Subscriber
	for cursor := ""; ; {
		var page web.SubscriberPage
		path := "/v1/subscribers?limit=1000"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		if _, err := c.do(ctx, "GET", path, nil, &page); err != nil {
			return all, err
		}
		all = append(all, page.Subscribers...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// DeleteSubscriber deletes subscriber id.
func (c *Client) DeleteSubscriber(ctx context.Context, id string) error {
	_, err := c.do(ctx, "DELETE", subPath(id), nil, nil)
	return err
}

// SetPaused pauses or resumes subscriber id.
func (c *Client) SetPaused(ctx context.Context, id string, paused bool) (web.Subscriber, error) {
	var s web.Subscriber
	action := "/resume"
	if paused {
		action = "/pause"
	}
	_, err := c.do(ctx, "POST", subPath(id)+action, nil, &s)
	return s, err
}

// RotateSecret gives subscriber id a new secret (in the answer's Secrets);
// the old ones sign beside it for grace ("" for the server's default).
func (c *Client) RotateSecret(ctx context.Context, id, grace string) (web.Subscriber, error) {
	var s web.Subscriber
	_, err := c.do(ctx, "POST", subPath(id)+"/secrets/rotate", web.RotateRequest{Grace: grace}, &s)
	return s, err
}

// EndCooldown ends subscriber id's cooldown now and returns its status.
func (c *Client) EndCooldown(ctx context.Context, id string) (web.Status, error) {
	var st web.Status
	_, err := c.do(ctx, "POST", subPath(id)+"/cooldown/end", nil, &st)
	return st, err
}

// Status returns subscriber id's limit, cooldown, in-flight and counts.
func (c *Client) Status(ctx context.Context, id string) (web.Status, error) {
	var s web.Status
	_, err := c.do(ctx, "GET", subPath(id)+"/status", nil, &s)
	return s, err
}

// Publish publishes an event; its result lists each subscriber's outcome.
func (c *Client) Publish(ctx context.Context, ev web.EventRequest) (*producer.PublishResult, error) {
	var res producer.PublishResult
	_, err := c.do(ctx, "POST", "/v1/events", ev, &res)
	return &res, err
}

// PublishBatch publishes up to producer.MaxBatch events, each as the body
// of POST /v1/events, in one call (POST /v1/events/batch).
func (c *Client) PublishBatch(ctx context.Context, events []json.RawMessage) (web.BatchAnswer, error) {
	var ans web.BatchAnswer
	_, err := c.do(ctx, "POST", "/v1/events/batch", web.BatchRequest{Events: events}, &ans)
	return ans, err
}

// DeadLetters lists one page of dead letters, of one subscriber when sub
// is set, from cursor ("": the newest).
func (c *Client) DeadLetters(ctx context.Context, sub string, limit int, cursor string) (web.DeadLetterPage, error) {
	q := url.Values{}
	if sub != "" {
		q.Set("subscriber", sub)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out web.DeadLetterPage
	_, err := c.do(ctx, "GET", "/v1/dead-letters?"+q.Encode(), nil, &out)
	return out, err
}

// Replay re-enqueues one batch of dead letters with their original event
// ids; ReplayAll goes on until every match is done.
func (c *Client) Replay(ctx context.Context, r web.ReplayRequest) (web.ReplayAnswer, error) {
	var out web.ReplayAnswer
	_, err := c.do(ctx, "POST", "/v1/dead-letters/replay", r, &out)
	return out, err
}

// ReplayAll calls Replay until the server answers no next cursor.
func (c *Client) ReplayAll(ctx context.Context, r web.ReplayRequest) ([]producer.ReplayOutcome, error) {
	var all []producer.ReplayOutcome
	for {
		page, err := c.Replay(ctx, r)
		all = append(all, page.Outcomes...)
		if err != nil || page.NextCursor == "" {
			return all, err
		}
		r.Cursor = page.NextCursor
	}
}

// DeliveryQuery selects a page of a subscriber's deliveries (see GET
// /v1/subscribers/{id}/deliveries). Zero fields do not filter.
type DeliveryQuery struct {
	State, Since, Until, Cursor string
	Limit                       int
}

// Deliveries lists one page of subscriber sub's deliveries, newest first.
func (c *Client) Deliveries(ctx context.Context, sub string, dq DeliveryQuery) (web.DeliveryPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"state": dq.State, "since": dq.Since, "until": dq.Until, "cursor": dq.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if dq.Limit > 0 {
		q.Set("limit", strconv.Itoa(dq.Limit))
	}
	var out web.DeliveryPage
	_, err := c.do(ctx, "GET", subPath(sub)+"/deliveries?"+q.Encode(), nil, &out)
	return out, err
}

// Delivery returns event ev's delivery to subscriber sub, with attempts.
func (c *Client) Delivery(ctx context.Context, sub, ev string) (tasks.DeliveryRecord, error) {
	var out tasks.DeliveryRecord
	_, err := c.do(ctx, "GET", subPath(sub)+"/deliveries/"+url.PathEscape(ev), nil, &out)
	return out, err
}

// Resend sends event ev to subscriber sub again, with the same webhook-id.
func (c *Client) Resend(ctx context.Context, sub, ev string) (*producer.PublishResult, error) {
	var res producer.PublishResult
	_, err := c.do(ctx, "POST", subPath(sub)+"/deliveries/"+url.PathEscape(ev)+"/resend", nil, &res)
	return &res, err
}

// Event returns event id with each subscriber's delivery.
func (c *Client) Event(ctx context.Context, id string) (producer.EventRecord, error) {
	var out producer.EventRecord
	_, err := c.do(ctx, "GET", "/v1/events/"+url.PathEscape(id), nil, &out)
	return out, err
}
