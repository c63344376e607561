package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// The console in a real browser: Debian's headless Chromium driven with
// chromedp over the DevTools protocol, against the web process, a worker
// and receivers on 127.0.0.1, all real. chromedp needs no driver process
// and no Node: the Go test is the whole harness.

// consoleBrowser is one Chromium for a test, answering the console's
// basic-auth prompt as an operator would (or declining it).
type consoleBrowser struct {
	ctx       context.Context
	login     atomic.Bool  // answer the prompt with the token; false: cancel it
	prompts   atomic.Int32 // auth challenges answered
	mu        sync.Mutex
	console   []string // the pages' console messages and exceptions
	shotDirs  []string
	shotsSeen map[string]bool
}

// newConsoleBrowser starts Chromium with a fresh profile, resolving no host
// name but 127.0.0.1 and evil.test (mapped to it, the cross-site attacker),
// so nothing leaves the machine.
func newConsoleBrowser(t *testing.T) *consoleBrowser {
	t.Helper()
	bin := "/usr/bin/chromium"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing: .ci/run installs it (apt-get install -y chromium)", bin)
		}
		t.Skipf("%s missing: make test installs it", bin)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("in-process-gpu", true), chromedp.Flag("no-zygote", true),
		chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1, MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"))
	ctx := launchChromium(t, opts)
	b := &consoleBrowser{ctx: ctx, shotsSeen: map[string]bool{}}
	b.shotDirs = []string{filepath.Join("..", ".hooklane", "console-screenshots")}
	if os.Getenv("HOOKLANE_SCREENSHOTS") == "1" {
		b.shotDirs = append(b.shotDirs, filepath.Join("console", "screenshots"))
	}
	// Every request pauses in the Fetch domain until continued; a 401's
	// challenge comes as AuthRequired, the prompt a person would see.
	paused, auth := chromedp.Events(ctx, fetch.RequestPaused), chromedp.Events(ctx, fetch.AuthRequired)
	msgs := chromedp.Console(ctx)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		for ev, err := range auth {
			if err != nil {
				return
			}
			answer := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
			if b.login.Load() {
				b.prompts.Add(1)
				answer = &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials,
					Username: "operator", Password: token}
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID, AuthChallengeResponse: answer})
		}
	}()
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m.String())
			b.mu.Unlock()
		}
	}()
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: new(true)}); err != nil {
		t.Fatal(err)
	}
	return b
}

// launchChromium starts the browser and its tab, bounded by two minutes for
// the whole session (a hung page fails the test). A browser that does not
// come up is started once more: Chromium has exited at start on a CI machine
// ("Zygote could not fork: process_type gpu-process … child_pid -1") before
// the test had sent it anything, which says nothing of the console. Since
// then it runs with --in-process-gpu and --no-zygote: no GPU process, and
// no zygote to fork the renderers (the browser starts them itself).
func launchChromium(t *testing.T, opts []chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	for attempt := 1; ; attempt++ {
		profile := chromedp.UserDataDir(t.TempDir()) // fresh each time
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, profile)...)
		ctx, cancelCtx := chromedp.NewContext(actx)
		ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
		stop := func() { cancelTimeout(); cancelCtx(); cancelAlloc() }
		err := chromedp.Do(ctx)
		if err == nil {
			t.Cleanup(stop)
			return ctx
		}
		stop()
		if attempt == 2 || !chromiumDidNotStart(err.Error()) {
			t.Fatal(err)
		}
		t.Logf("Chromium did not start, starting it once more: %v", err)
	}
}

// chromiumDidNotStart tells a browser that never came up (chromedp's two
// launch errors) from any other failure.
func chromiumDidNotStart(msg string) bool {
	return strings.HasPrefix(msg, "chrome failed to start") || strings.HasPrefix(msg, "websocket url timeout reached")
}

// open loads url and returns the document's HTTP status.
func (b *consoleBrowser) open(t *testing.T, url string) int64 {
	t.Helper()
	resp, err := chromedp.Run(b.ctx, chromedp.NavigateResponse(url))
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return resp.Status
}

// click clicks sel (a button or link that loads a page) and returns the
// loaded document's status and where it is.
func (b *consoleBrowser) click(t *testing.T, sel string) (int64, string) {
	t.Helper()
	resp, err := chromedp.RunResponse(b.ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
	return resp.Status, b.location(t)
}

func (b *consoleBrowser) location(t *testing.T) string {
	t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// text is what the page shows of sel (innerText: rendered, visible text).
func (b *consoleBrowser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s on %s: %v", sel, b.location(t), err)
	}
	return s
}

func eval[T any](t *testing.T, b *consoleBrowser, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// shot writes the page as name.png into each screenshot folder.
func (b *consoleBrowser) shot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	for _, dir := range b.shotDirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// messages are the console messages so far that contain s.
func (b *consoleBrowser) messages(s string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.console {
		if strings.Contains(strings.ToLower(m), strings.ToLower(s)) {
			out = append(out, m)
		}
	}
	return out
}

// An operator's session in the console, in one browser: log in through the
// prompt, find a delivered event, open its attempts and resend it; pause
// and resume; replay a dead letter; and the console's defences: a hostile
// body and payload show as text, a cross-site form is refused.
func TestConsoleInABrowser(t *testing.T) {
	testkit.Heavy(t, "a browser")
	b := setup(t, fastRetries)
	start := time.Now()
	shop := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { io.WriteString(w, "ok, stored") })
	var healthy atomic.Bool
	flaky := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "maintenance")
		}
	})
	hostile := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { io.WriteString(w, `<script>window.__pwned=1</script>`) })
	// mixed answers some requests 500 and some 429: the chart's three colours.
	mixed := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		switch n % 4 {
		case 1:
			w.WriteHeader(http.StatusInternalServerError)
		case 3:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	// slow asks for an hour's wait at its first request.
	slow := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	// hold answers once released: its delivery stays in flight till then.
	release := make(chan struct{})
	hold := testkit.NewSink(t, func(http.ResponseWriter, int) { <-release })
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	for id, body := range map[string]map[string]any{
		"hold":    {"url": hold.URL, "event_types": []string{"hold.*"}},
		"slow":    {"url": slow.URL, "event_types": []string{"ship.*"}},
		"shop":    {"url": shop.URL, "event_types": []string{"order.*"}},
		"hostile": {"url": hostile.URL, "event_types": []string{"order.*"}},
		"flaky":   {"url": flaky.URL, "event_types": []string{"invoice.*"}, "max_attempts": 1},
		"mixed":   {"url": mixed.URL, "event_types": []string{"order.*"}},
	} {
		if r := b.call(t, "PUT", "/v1/subscribers/"+id, body); r.status != http.StatusCreated {
			t.Fatalf("PUT %s: %d %s", id, r.status, r.body)
		}
	}
	for i := range 6 {
		b.call(t, "POST", "/v1/events", fmt.Sprintf(`{"id":"evt_%d","type":"order.created","data":{"order":%d,"total_cents":%d}}`, i, i, 1000+37*i))
	}
	b.call(t, "POST", "/v1/events", `{"id":"evt_xss","type":"order.created","data":{"note":"\"><img src=x onerror=window.__pwned=2>"}}`)
	b.call(t, "POST", "/v1/events", `{"id":"inv_1","type":"invoice.created","data":{"invoice":1}}`)
	b.call(t, "POST", "/v1/events", `{"id":"ship_1","type":"ship.sent","data":{"parcel":1}}`)
	b.call(t, "POST", "/v1/events", `{"id":"hold_1","type":"hold.on","data":{"n":1}}`)

	br := newConsoleBrowser(t)
	console := b.srv.URL + "/console"

	// Log in: declined, the prompt leaves a 401 and no console; answered
	// with the token, the subscribers.
	if st := br.open(t, console+"/subscribers"); st != http.StatusUnauthorized {
		t.Fatalf("without the password: %d, want 401", st)
	}
	if n := eval[int](t, br, `document.querySelectorAll('#subscribers').length`); n != 0 {
		t.Fatal("the subscriber list shows without the password")
	}
	br.login.Store(true)
	if st := br.open(t, console+"/subscribers"); st != http.StatusOK {
		t.Fatalf("with the password: %d", st)
	}
	if br.prompts.Load() == 0 {
		t.Fatal("the page loaded without a basic-auth challenge answered")
	}
	if list := br.text(t, "#subscribers"); !strings.Contains(list, "shop") || !strings.Contains(list, "flaky") || !strings.Contains(list, "hostile") {
		t.Fatalf("subscriber list:\n%s", list)
	}

	// Find a delivered event by its id, open its attempts, resend it.
	b.waitState(t, "shop", "evt_1", tasks.StateDelivered)
	b.waitState(t, "flaky", "inv_1", tasks.StateDead)
	b.waitState(t, "hostile", "evt_xss", tasks.StateDelivered)
	br.open(t, console+"/subscribers") // the counts, now that they are in
	br.shot(t, "subscribers")
	if err := chromedp.Do(br.ctx, chromedp.SetValue(chromedp.CSS(`form.search input[name="q"]`), "evt_1")); err != nil {
		t.Fatal(err)
	}
	if st, loc := br.click(t, `form.search button`); st != http.StatusOK || !strings.HasSuffix(loc, "/console/events/evt_1") {
		t.Fatalf("search for evt_1: %d at %s", st, loc)
	}
	if row := br.text(t, `tr[data-subscriber="shop"]`); !strings.Contains(row, "delivered") {
		t.Fatalf("the event's delivery to shop: %q", row)
	}
	br.shot(t, "event")
	if st, loc := br.click(t, `tr[data-subscriber="shop"] a[href$="/deliveries/evt_1"]`); st != http.StatusOK || !strings.HasSuffix(loc, "/console/subscribers/shop/deliveries/evt_1") {
		t.Fatalf("open the attempts: %d at %s", st, loc)
	}
	if a := br.text(t, `#attempts li[data-attempt="1"]`); !strings.Contains(a, "HTTP 200") || !strings.Contains(a, "ok, stored") {
		t.Fatalf("the first attempt: %q; want its 200 and the body kept", a)
	}
	// What was sent and what came back, unfolded for the newest attempt.
	var sig string
	for _, a := range shop.Got() {
		if a.ID == "evt_1" {
			sig = a.Header.Get("Webhook-Signature")
		}
	}
	if h := br.text(t, `#attempts li[data-attempt="1"] details.exchange`); !strings.Contains(h, "Webhook-Signature\t"+sig[:9]+"…") ||
		strings.Contains(h, sig) || !strings.Contains(h, "Webhook-Id\tevt_1") || !strings.Contains(h, "Content-Length\t10") {
		t.Fatalf("the first attempt's headers: %q; want the request's, its signature cut, and the answer's", h)
	}
	if l := br.text(t, `#attempts li[data-attempt="1"] .latency`); !strings.HasSuffix(l, " ms") {
		t.Fatalf("the first attempt's latency: %q", l)
	}
	if p := br.text(t, "#payload"); !strings.HasPrefix(p, `{"id":"evt_1","type":"order.created"`) {
		t.Fatalf("the body sent: %q; want the event as sent", p)
	}
	br.shot(t, "delivery")
	if st, _ := br.click(t, "#resend"); st != http.StatusOK || !strings.Contains(br.text(t, ".flash"), "Sent again") {
		t.Fatalf("resend: %d", st)
	}
	testkit.Eventually(t, 15*time.Second, "evt_1 at shop twice", func() bool {
		n := 0
		for _, a := range shop.Got() {
			if a.ID == "evt_1" {
				n++
			}
		}
		return n == 2
	})
	b.waitState(t, "shop", "evt_1", tasks.StateDelivered)

	// Pause, then resume.
	br.open(t, console+"/subscribers/shop")
	if st, _ := br.click(t, "#pause"); st != http.StatusOK || !strings.Contains(br.text(t, "#paused-badge"), "paused") {
		t.Fatalf("pause: %d", st)
	}
	if s, err := b.p.GetSubscriber(t.Context(), "shop"); err != nil || !s.Paused {
		t.Fatalf("after the pause: %v %v", s.Paused, err)
	}
	if st, _ := br.click(t, "#resume"); st != http.StatusOK || eval[int](t, br, `document.querySelectorAll('#paused-badge').length`) != 0 {
		t.Fatalf("resume: %d", st)
	}
	if s, err := b.p.GetSubscriber(t.Context(), "shop"); err != nil || s.Paused {
		t.Fatalf("after the resume: %v %v", s.Paused, err)
	}

	// End the hour's cooldown slow asked for: ship_1 goes at once.
	b.waitState(t, "slow", "ship_1", tasks.StateCooling)
	br.open(t, console+"/subscribers/slow")
	if st, _ := br.click(t, "#end-cooldown"); st != http.StatusOK || !strings.Contains(br.text(t, ".flash"), "Cooldown ended") {
		t.Fatalf("end the cooldown: %d", st)
	}
	b.waitState(t, "slow", "ship_1", tasks.StateDelivered)
	if n := eval[int](t, br, `document.querySelectorAll('#end-cooldown').length`); n != 0 {
		t.Fatal("the button to end the cooldown still shows after it ended")
	}

	// A delivery in flight: its page reloads itself until it is delivered.
	b.waitState(t, "hold", "hold_1", tasks.StateInFlight)
	br.open(t, console+"/subscribers/hold/deliveries/hold_1")
	if r := br.text(t, "#refresh"); !strings.Contains(r, "reloads itself") {
		t.Fatalf("the in-flight delivery's page: %q", r)
	}
	br.shot(t, "inflight")
	released.Do(func() { close(release) })
	// Read in one evaluation, while the page may be reloading (an error is
	// "not yet"): the page no longer reloading and its attempt's 200.
	testkit.Eventually(t, 15*time.Second, "the page reloaded with hold_1 delivered, no longer reloading", func() bool {
		a, err := chromedp.Run(br.ctx, chromedp.Evaluate[string](
			`(document.getElementById('refresh') === null && document.querySelector('#attempts li[data-attempt="1"]')?.textContent) || ""`))
		return err == nil && strings.Contains(a, "HTTP 200")
	})

	// Replay a dead letter, once the receiver is back.
	healthy.Store(true)
	br.open(t, console+"/subscribers/flaky")
	if st, loc := br.click(t, `tr[data-task="flaky:inv_1"] button`); st != http.StatusOK || !strings.HasSuffix(loc, "/console/subscribers/flaky/replay") {
		t.Fatalf("replay: %d at %s", st, loc)
	}
	if o := br.text(t, `#outcomes tr[data-task="flaky:inv_1"]`); !strings.Contains(o, "enqueued") {
		t.Fatalf("replay outcome: %q", o)
	}
	br.shot(t, "replayed")
	b.waitState(t, "flaky", "inv_1", tasks.StateDelivered)
	if got := flaky.Got(); len(got) != 2 || got[1].ID != "inv_1" {
		t.Fatalf("flaky got %d requests; want inv_1 twice", len(got))
	}

	// A receiver's <script> and a publisher's attribute breaker: text.
	for _, path := range []string{"/subscribers/hostile/deliveries/evt_xss", "/events/evt_xss"} {
		br.open(t, console+path)
		if eval[bool](t, br, `window.__pwned !== undefined || document.querySelector('img[src="x"]') !== null || document.scripts.length !== 1`) {
			t.Fatalf("%s: markup from a receiver or a publisher was rendered (or ran)", path)
		}
		if p := br.text(t, "#payload"); !strings.Contains(p, `"><img src=x onerror=window.__pwned=2>`) {
			t.Fatalf("%s: the payload is not shown as text: %q", path, p)
		}
	}
	br.open(t, console+"/subscribers/hostile/deliveries/evt_xss")
	if a := br.text(t, "#attempts"); !strings.Contains(a, `<script>window.__pwned=1</script>`) {
		t.Fatalf("the receiver's body is not shown as text: %q", a)
	}

	// Another site's form, even with a token it somehow got, cannot act
	// with the operator's credentials.
	stolen := formToken(t, b.consoleGet(t, "/console/subscribers/shop").body, "/console/subscribers/shop/pause")
	evil := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		csrf := ""
		if r.URL.Query().Get("with") == "token" {
			csrf = `<input type="hidden" name="csrf" value="` + stolen + `">`
		}
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/console/subscribers/shop/pause">%s</form>
<script>document.getElementById('f').submit()</script>`, b.srv.URL, csrf)
	}))
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "evil.test", 1)
	for _, with := range []string{"none", "token"} {
		resp, err := chromedp.Run(br.ctx, chromedp.WaitEvent(network.ResponseReceived, func(ev network.EventResponseReceived) bool {
			return ev.Type == network.ResourceTypeDocument && strings.HasPrefix(ev.Response.URL, console)
		}, chromedp.Navigate(evilURL+"/?with="+with)))
		if err != nil {
			t.Fatalf("the cross-site form (%s): %v", with, err)
		}
		if resp.Response.Status != http.StatusForbidden {
			t.Fatalf("the cross-site form (%s): %d, want 403", with, resp.Response.Status)
		}
		testkit.Eventually(t, 10*time.Second, "the refusal's page", func() bool {
			return strings.HasPrefix(br.location(t), console) && len(eval[string](t, br, `document.getElementById('error-message')?.innerText ?? ''`)) > 0
		})
		if msg := br.text(t, "#error-message"); !strings.Contains(msg, "another site") {
			t.Fatalf("the cross-site form (%s) was refused for another reason: %q", with, msg)
		}
		if s, err := b.p.GetSubscriber(t.Context(), "shop"); err != nil || s.Paused {
			t.Fatalf("after the cross-site form (%s): paused %v %v", with, s.Paused, err)
		}
	}
	br.shot(t, "refused")

	// The chart: the last deliveries' attempts over time, in three colours.
	for _, ev := range []string{"evt_0", "evt_1", "evt_2", "evt_3", "evt_4", "evt_5", "evt_xss"} {
		b.waitState(t, "mixed", ev, tasks.StateDelivered)
	}
	br.open(t, console+"/subscribers/mixed?span=deliveries")
	for _, class := range []string{"delivered", "throttled", "failed"} {
		if n := eval[int](t, br, `document.querySelectorAll('svg.chart rect.`+class+`').length`); n == 0 {
			t.Errorf("the chart has no %s bar", class)
		}
	}
	if legend := br.text(t, "#chart .legend"); !strings.Contains(legend, "delivered 7") {
		t.Errorf("chart legend %q; want mixed's 7 deliveries", legend)
	}
	br.shot(t, "subscriber")

	// Every subscriber's deliveries, then those of invoice events alone.
	if st, loc := br.click(t, `header nav a[href="/console/deliveries"]`); st != http.StatusOK || !strings.HasSuffix(loc, "/console/deliveries") {
		t.Fatalf("the deliveries link: %d at %s", st, loc)
	}
	for _, row := range []string{"shop:evt_1", "mixed:evt_xss", "flaky:inv_1"} {
		if n := eval[int](t, br, `document.querySelectorAll('#all-deliveries tr[data-delivery="`+row+`"]').length`); n != 1 {
			t.Errorf("every subscriber's deliveries: %d rows of %s, want 1", n, row)
		}
	}
	br.shot(t, "deliveries")
	if err := chromedp.Do(br.ctx, chromedp.SetValue(chromedp.CSS(`#delivery-filters input[name="type"]`), "invoice.*")); err != nil {
		t.Fatal(err)
	}
	if st, _ := br.click(t, `#delivery-filters button`); st != http.StatusOK {
		t.Fatalf("filter by type: %d", st)
	}
	if rows := br.text(t, "#all-deliveries tbody"); !strings.Contains(rows, "inv_1") || strings.Contains(rows, "evt_") {
		t.Fatalf("the invoice.* deliveries: %q", rows)
	}

	// Create a subscriber (a refused URL first), edit it, delete it.
	br.open(t, console+"/subscribers")
	if st, loc := br.click(t, "#new-subscriber"); st != http.StatusOK || !strings.HasSuffix(loc, "/console/create/subscriber") {
		t.Fatalf("new subscriber: %d at %s", st, loc)
	}
	fill := func(sel, v string) {
		t.Helper()
		if err := chromedp.Do(br.ctx, chromedp.SetValue(chromedp.CSS(sel), v)); err != nil {
			t.Fatal(err)
		}
	}
	fill("#f-id", "made")
	fill("#f-url", "ftp://127.0.0.1/x")
	fill("#f-types", "ship.*, order.created")
	if st, _ := br.click(t, "#save"); st != http.StatusUnprocessableEntity || !strings.Contains(br.text(t, "#form-error"), "url") {
		t.Fatalf("create with an ftp URL: %d", st)
	}
	br.shot(t, "subscriber-form")
	fill("#f-url", "http://127.0.0.1:9/made")
	if st, _ := br.click(t, "#save"); st != http.StatusOK || !strings.HasPrefix(br.text(t, "#new-secret"), "whsec_") {
		t.Fatalf("create: %d", st)
	}
	br.click(t, "#to-subscriber")
	br.click(t, "#edit")
	fill("#f-url", "http://127.0.0.1:9/edited")
	if st, _ := br.click(t, "#save"); st != http.StatusOK || !strings.Contains(br.text(t, ".flash"), "Saved") ||
		br.text(t, "#subscriber-url") != "http://127.0.0.1:9/edited" {
		t.Fatalf("edit: %d", st)
	}
	br.click(t, "#edit")
	fill(`#delete-subscriber input[name="confirm"]`, "made")
	if st, loc := br.click(t, "#delete"); st != http.StatusOK || !strings.HasSuffix(loc, "/console/subscribers?done=deleted") {
		t.Fatalf("delete: %d at %s", st, loc)
	}
	if _, err := b.p.GetSubscriber(t.Context(), "made"); err == nil {
		t.Fatal("made is still there after its delete")
	}

	// The console's own pages broke no rule of their CSP (an inline style or
	// script would be reported), and nothing was blocked.
	if v := br.messages("Content Security Policy"); len(v) > 0 {
		t.Fatalf("CSP violations:\n%s", strings.Join(v, "\n"))
	}
	t.Logf("the browser session took %s (setup included)", time.Since(start).Round(time.Millisecond))
}
