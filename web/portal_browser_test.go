package web_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// A tenant's user in the portal, in Chromium: the link opens a's console
// with no password, showing a's endpoints and none of b's (which share an
// id with a's); its buttons pause, resume and send a test event to a's
// endpoint alone; its form creates an endpoint of a's; the link used
// again, and an expired one, are refused; the operator's pages stay shut.
func TestPortalInABrowser(t *testing.T) {
	testkit.Heavy(t, "a browser")
	b := setup(t, &worker.Config{})
	aSink, bSink := testkit.NewSink(t, nil), testkit.NewSink(t, nil)
	var healthy atomic.Bool
	flaky := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	for tenant, subs := range map[string]map[string]string{
		"a": {"orders": aSink.URL, "billing": aSink.URL},
		"b": {"orders": bSink.URL, "b-only": bSink.URL},
	} {
		b.call(t, "PUT", "/v1/tenants/"+tenant, map[string]any{"max_rate": 20, "max_in_flight": 30})
		for id, u := range subs {
			if r := b.call(t, "PUT", "/v1/tenants/"+tenant+"/subscribers/"+id, map[string]any{"url": u}); r.status != http.StatusCreated {
				t.Fatalf("PUT %s's %s: %d %s", tenant, id, r.status, r.body)
			}
		}
	}
	if r := b.call(t, "PUT", "/v1/tenants/a/subscribers/flaky", map[string]any{"url": flaky.URL, "event_types": []string{"invoice.*"},
		"max_attempts": 1}); r.status != http.StatusCreated {
		t.Fatalf("PUT a's flaky: %d %s", r.status, r.body)
	}
	b.call(t, "POST", "/v1/tenants/a/events", `{"id":"inv_1","type":"invoice.created","data":{"invoice":1}}`)
	if r := b.call(t, "POST", "/v1/tenants/a/events", `{"id":"ord_1","type":"order.created","data":{"order":1}}`); r.status != http.StatusAccepted {
		t.Fatalf("publish a's ord_1: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, 15*time.Second, "a's ord_1 delivered", func() bool {
		r := b.callRaw(t, "GET", "/v1/tenants/a/subscribers/orders/deliveries/ord_1", nil, bearer)
		return r.status == 200 && r.json(t)["state"] == tasks.StateDelivered
	})

	br := newConsoleBrowser(t) // login false: the basic-auth prompt is declined
	link := b.call(t, "POST", "/v1/tenants/a/portal", nil).json(t)["url"].(string)
	if st := br.open(t, link); st != http.StatusOK || !strings.HasSuffix(br.location(t), "/console/subscribers") {
		t.Fatalf("open the portal link: %d at %s", st, br.location(t))
	}
	if br.prompts.Load() != 0 {
		t.Error("the portal asked for the operator's password")
	}
	list := br.text(t, "#subscribers")
	if !strings.Contains(list, "orders") || !strings.Contains(list, "billing") || strings.Contains(list, "b-only") {
		t.Fatalf("a's portal lists:\n%s\nwant a's orders and billing, not b's b-only", list)
	}
	if brand := br.text(t, "header .brand"); !strings.Contains(brand, "portal · a") {
		t.Errorf("the header says %q; want the portal of a", brand)
	}
	if n := eval[int](t, br, `document.querySelectorAll('a[href^="/monitoring"]').length`); n != 0 {
		t.Error("the portal links to asynqmon")
	}
	br.shot(t, "portal-subscribers")

	// a's orders: its delivery, pause and resume, a test event
	if st, loc := br.click(t, `#subscribers a[href="/console/subscribers/orders"]`); st != http.StatusOK || !strings.HasSuffix(loc, "/console/subscribers/orders") {
		t.Fatalf("open a's orders: %d at %s", st, loc)
	}
	if d := br.text(t, "main"); !strings.Contains(d, "ord_1") {
		t.Fatalf("a's orders page does not show its delivery ord_1:\n%s", d)
	}
	br.shot(t, "portal-subscriber")
	if st, _ := br.click(t, "#pause"); st != http.StatusOK || b.call(t, "GET", "/v1/tenants/a/subscribers/orders", nil).json(t)["paused"] != true {
		t.Fatalf("pause in the portal: %d; a's orders not paused", st)
	}
	if b.call(t, "GET", "/v1/tenants/b/subscribers/orders", nil).json(t)["paused"] != false {
		t.Fatal("pausing a's orders paused b's")
	}
	if st, _ := br.click(t, "#resume"); st != http.StatusOK || b.call(t, "GET", "/v1/tenants/a/subscribers/orders", nil).json(t)["paused"] != false {
		t.Fatalf("resume in the portal: %d", st)
	}
	if st, loc := br.click(t, "#send-test"); st != http.StatusOK || !strings.Contains(loc, "/console/subscribers/orders/deliveries/ping_") {
		t.Fatalf("send a test event in the portal: %d at %s", st, loc)
	}
	testkit.Eventually(t, 15*time.Second, "a's orders gets the test event", func() bool {
		for _, g := range aSink.Got() {
			if strings.HasPrefix(g.ID, "ping_") {
				return true
			}
		}
		return false
	})
	// rotate a's orders' secret: shown once, b's untouched
	ta, tb := b.tenantProducer(t, "a"), b.tenantProducer(t, "b")
	ctx := context.Background()
	aBefore, _ := ta.GetSubscriber(ctx, "orders")
	bBefore, _ := tb.GetSubscriber(ctx, "orders")
	br.open(t, b.srv.URL+"/console/subscribers/orders")
	if st, _ := br.click(t, "#rotate"); st != http.StatusOK || !strings.Contains(br.text(t, "main"), "whsec_") {
		t.Fatalf("rotate in the portal: %d\n%s", st, br.text(t, "main"))
	}
	aAfter, _ := ta.GetSubscriber(ctx, "orders")
	bAfter, _ := tb.GetSubscriber(ctx, "orders")
	if aAfter.Secrets[0] == aBefore.Secrets[0] || bAfter.Secrets[0] != bBefore.Secrets[0] {
		t.Fatal("rotate in a's portal: want a's orders' secret new, b's as it was")
	}
	// resend a's ord_1 from its delivery page
	sent := func() int {
		n := 0
		for _, g := range aSink.Got() {
			if g.ID == "ord_1" {
				n++
			}
		}
		return n
	}
	before := sent() // orders' and billing's
	br.open(t, b.srv.URL+"/console/subscribers/orders/deliveries/ord_1")
	if st, _ := br.click(t, "#resend"); st != http.StatusOK || !strings.Contains(br.text(t, ".flash"), "Sent again") {
		t.Fatalf("resend in the portal: %d", st)
	}
	testkit.Eventually(t, 15*time.Second, "ord_1 sent again", func() bool { return sent() == before+1 })
	// replay a's dead letter once its endpoint is back
	testkit.Eventually(t, 15*time.Second, "a's inv_1 dead", func() bool {
		r := b.callRaw(t, "GET", "/v1/tenants/a/subscribers/flaky/deliveries/inv_1", nil, bearer)
		return r.status == 200 && r.json(t)["state"] == tasks.StateDead
	})
	healthy.Store(true)
	br.open(t, b.srv.URL+"/console/subscribers/flaky")
	if st, loc := br.click(t, `tr[data-task="flaky:inv_1"] button`); st != http.StatusOK || !strings.HasSuffix(loc, "/console/subscribers/flaky/replay") {
		t.Fatalf("replay in the portal: %d at %s", st, loc)
	}
	testkit.Eventually(t, 15*time.Second, "a's inv_1 replayed and delivered", func() bool { return flaky.Count() == 2 })
	if bSink.Count() != 0 {
		t.Errorf("b's endpoints got %d requests from a's portal", bSink.Count())
	}

	// a new endpoint of a's, through the form, within a's caps: its three
	// endpoints hold the 30 in flight a's operator allows, so the form says
	// so; with the cap raised it is created
	create := func() (int64, string) {
		br.open(t, b.srv.URL+"/console/create/subscriber")
		if err := chromedp.Do(br.ctx,
			chromedp.SetValue(chromedp.CSS(`#subscriber-form input[name="id"]`), "shipping"),
			chromedp.SetValue(chromedp.CSS(`#subscriber-form input[name="url"]`), aSink.URL+"/shipping"),
		); err != nil {
			t.Fatal(err)
		}
		st, _ := br.click(t, "#save")
		return st, br.text(t, "main")
	}
	if st, page := create(); st != http.StatusUnprocessableEntity || !strings.Contains(page, "allows 30 in flight") {
		t.Fatalf("create past a's in-flight cap in the portal: %d\n%s", st, page)
	}
	br.shot(t, "portal-capped")
	b.call(t, "PUT", "/v1/tenants/a", map[string]any{"max_rate": 20, "max_in_flight": 40})
	if st, page := create(); st != http.StatusOK || !strings.Contains(page, "whsec_") {
		t.Fatalf("create an endpoint in the portal: %d\n%s", st, page)
	}
	if r := b.call(t, "GET", "/v1/tenants/a/subscribers/shipping", nil); r.status != 200 {
		t.Errorf("the portal's new endpoint is not a's: %d", r.status)
	}
	if r := b.call(t, "GET", "/v1/tenants/b/subscribers/shipping", nil); r.status != 404 {
		t.Errorf("the portal's new endpoint is b's too: %d", r.status)
	}

	// the operator's pages stay shut to the portal's session
	if st := br.open(t, b.srv.URL+"/monitoring/"); st != http.StatusUnauthorized {
		t.Errorf("asynqmon from the portal: %d; want 401", st)
	}
	// the link again, and an expired one
	if st := br.open(t, link); st != http.StatusGone {
		t.Errorf("the portal link opened again: %d; want 410", st)
	}
	br.shot(t, "portal-refused")
	expired := b.call(t, "POST", "/v1/tenants/a/portal", nil).json(t)["url"].(string)
	for _, k := range b.rdb.Keys(ctx, tasks.Keys(b.ns).PortalLink("*")).Val() {
		b.rdb.PExpire(ctx, k, time.Millisecond)
	}
	testkit.Eventually(t, 5*time.Second, "the expired link's grant gone", func() bool {
		return len(b.rdb.Keys(ctx, tasks.Keys(b.ns).PortalLink("*")).Val()) == 0
	})
	if st := br.open(t, expired); st != http.StatusGone {
		t.Errorf("an expired portal link: %d; want 410", st)
	}
	// the console's script ran in the portal without breaking its CSP
	if msgs := append(br.messages("Content Security Policy"), br.messages("Uncaught")...); len(msgs) > 0 {
		t.Errorf("the portal's pages: %v", msgs)
	}
}

// tenantProducer is b's Producer for tenant name.
func (b *bundle) tenantProducer(t *testing.T, name string) *producer.Producer {
	t.Helper()
	p, err := b.p.Tenant(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
