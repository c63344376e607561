package web_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// chromium runs Debian's headless Chromium on pageURL and returns the DOM
// after the page has run for a virtual-time budget, and Chromium's net log
// (every HTTP exchange it made). It uses a fresh profile, and resolves no
// host name but 127.0.0.1, so asynqmon's web-font links and Chromium's own
// background services send nothing off this machine. --in-process-gpu and
// --no-zygote: no GPU process and no zygote forking (the zygote's fork of
// the GPU process failed once on a CI machine).
func chromium(t *testing.T, pageURL string) (dom, netlog string) {
	t.Helper()
	bin := "/usr/bin/chromium"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing: .ci/run installs it (apt-get install -y chromium)", bin)
		}
		t.Skipf("%s missing: make test installs it", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var logFile string
	for attempt := 1; ; attempt++ {
		dir := t.TempDir()
		logFile = filepath.Join(dir, "netlog.json")
		cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--in-process-gpu", "--no-zygote", "--disable-quic",
			"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
			"--user-data-dir="+filepath.Join(dir, "profile"), "--log-net-log="+logFile,
			"--virtual-time-budget=15000", "--dump-dom", pageURL)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err == nil {
			dom = string(out)
			break
		}
		// A Chromium that exited with an error and printed no page never
		// loaded it (seen once on CI: its zygote could not fork): once more.
		if attempt == 2 || len(out) > 0 || ctx.Err() != nil {
			t.Fatalf("chromium: %v\n%s%s", err, out, stderr.String())
		}
		t.Logf("chromium exited before printing a page (%v), starting it once more:\n%s", err, stderr.String())
	}
	log, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("chromium wrote no net log: %v", err)
	}
	return dom, string(log)
}

// A browser opens asynqmon with the token as basic-auth password and sees
// the queue list, rendered from the UI's own /monitoring/api calls; without
// credentials it gets 401 and no UI.
func TestBrowserSeesQueueList(t *testing.T) {
	testkit.Heavy(t, "a browser")
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "http://127.0.0.1:9/x"})
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1}`) // no worker: it stays pending
	u, _ := url.Parse(b.srv.URL + "/monitoring/")

	dom, netlog := chromium(t, u.String())
	if !strings.Contains(netlog, "HTTP/1.1 401 Unauthorized") || strings.Contains(netlog, "HTTP/1.1 200 OK") {
		t.Fatalf("without credentials: want only 401 answers; net log has 401: %v, 200: %v",
			strings.Contains(netlog, "401 Unauthorized"), strings.Contains(netlog, "200 OK"))
	}
	if strings.Contains(dom, "Queues") || strings.Contains(dom, b.ns) {
		t.Fatalf("without credentials the page shows the UI:\n%.2000s", dom)
	}

	u.User = url.UserPassword("operator", token)
	dom, _ = chromium(t, u.String())
	// The queues table: the queue's name as a link to its page, beside the
	// state columns the UI draws only after /monitoring/api/queues answered.
	q := tasks.Keys(b.ns).DeliveryQueue("", "s", tasks.LaneFresh, 1)
	if !strings.Contains(dom, `href="/monitoring/queues/`+q+`"`) || !strings.Contains(dom, "pending") {
		body := dom
		if i := strings.Index(dom, "<body"); i >= 0 {
			body = dom[i:]
		}
		t.Fatalf("with credentials the queue list is missing (queue %s):\n%.3000s", q, body)
	}
}
