package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/examples/verify"
	"github.com/hooklane/hooklane/tasks"
)

// sampleCase is one request a receiver's verifier is given, and whether it
// must accept it.
type sampleCase struct {
	Name    string            `json:"name"`
	Secret  string            `json:"secret"`
	Headers map[string]string `json:"headers"` // lower-case names, as Node gives them
	Body    []byte            `json:"body"`    // base64 in JSON
	NowMS   int64             `json:"now_ms"`
	Want    bool              `json:"-"`
}

// The receiver samples the README shows (deploy/examples/verify: Go, Node,
// Python) verify a request exactly as the worker signs and sends it (post,
// to an endpoint on 127.0.0.1), with the subscriber's secret and with a
// rotated-out one still in its grace, and refuse it under another secret,
// with its body or webhook-id changed, or more than 5 minutes from its
// webhook-timestamp. Node and Python are run when installed.
func TestReceiverSamplesVerifyTheWorkersRequests(t *testing.T) {
	cur, old, other := newSecret(t), newSecret(t), newSecret(t)
	type request struct {
		h    http.Header
		body []byte
	}
	got := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- request{r.Header.Clone(), b}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	sub := &tasks.Subscriber{ID: "s", URL: srv.URL, Secrets: []string{cur},
		Retiring: []tasks.RetiringSecret{{Secret: old, Until: time.Now().Add(time.Hour)}}}
	// Not ASCII, escaped HTML and a line separator: the body is signed and
	// checked byte for byte, never re-encoded.
	sent := []byte(`{"id":"evt_1","type":"video.trending","timestamp":"2026-07-11T08:14:02Z","data":{"name":"Zoë","html":"\u003cb\u003e","sep":"` + "\u2028" + `"}}`)
	if r := post(context.Background(), srv.Client(), sub, "evt_1", sent, 0, nil); r.err != nil || r.status != http.StatusNoContent {
		t.Fatalf("post: status %d, err %v", r.status, r.err)
	}
	req := <-got
	h, body := req.h, req.body
	if !bytes.Equal(body, sent) {
		t.Fatalf("the endpoint got %q, want the stored event %q", body, sent)
	}
	sec, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		t.Fatalf("webhook-timestamp %q: %v", h.Get("webhook-timestamp"), err)
	}
	at := time.Unix(sec, 0)
	headers := map[string]string{}
	for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature", "content-type"} {
		headers[k] = h.Get(k)
	}
	otherID := map[string]string{}
	for k, v := range headers {
		otherID[k] = v
	}
	otherID["webhook-id"] = "evt_2"
	c := func(name, secret string, hd map[string]string, b []byte, now time.Time, want bool) sampleCase {
		return sampleCase{name, secret, hd, b, now.UnixMilli(), want}
	}
	cases := []sampleCase{
		c("the subscriber's secret", cur, headers, sent, at, true),
		c("the retiring secret, in its grace", old, headers, sent, at, true),
		c("5 minutes after the timestamp", cur, headers, sent, at.Add(verify.Tolerance), true),
		c("5 minutes before it", cur, headers, sent, at.Add(-verify.Tolerance), true),
		c("another secret", other, headers, sent, at, false),
		c("the body changed", cur, headers, bytes.Replace(sent, []byte("Zoë"), []byte("Zoe"), 1), at, false),
		c("the webhook-id changed", cur, otherID, sent, at, false),
		c("5 minutes and a second after", cur, headers, sent, at.Add(verify.Tolerance+time.Second), false),
		c("5 minutes and a second before", cur, headers, sent, at.Add(-verify.Tolerance-time.Second), false),
	}
	if n := len(bytes.Fields([]byte(headers["webhook-signature"]))); n != 2 {
		t.Fatalf("webhook-signature %q has %d entries; want one per signing secret, 2", headers["webhook-signature"], n)
	}

	t.Run("Go", func(t *testing.T) {
		for _, tc := range cases {
			hd := http.Header{}
			for k, v := range tc.Headers {
				hd.Set(k, v)
			}
			err := verify.Signature(tc.Secret, hd, tc.Body, time.UnixMilli(tc.NowMS))
			if (err == nil) != tc.Want {
				t.Errorf("%s: Signature says %v; want accepted %v", tc.Name, err, tc.Want)
			}
		}
	})
	dir, err := filepath.Abs("../deploy/examples/verify")
	if err != nil {
		t.Fatal(err)
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []struct{ name, bin, script string }{
		{"Node", "node", `const {verify} = require(process.argv[1] + "/verify.js");
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
console.log(JSON.stringify(cases.map((c) => verify(c.secret, c.headers, Buffer.from(c.body, "base64"), c.now_ms))));`},
		{"Python", "python3", `import base64, json, sys
sys.path.insert(0, sys.argv[1])
from verify import verify
cases = json.load(sys.stdin)
print(json.dumps([verify(c["secret"], c["headers"], base64.b64decode(c["body"]), c["now_ms"] / 1000) for c in cases]))`},
	} {
		t.Run(lang.name, func(t *testing.T) {
			bin, err := exec.LookPath(lang.bin)
			if err != nil {
				t.Skipf("%s is not installed", lang.bin)
			}
			flag := map[string]string{"node": "-e", "python3": "-c"}[lang.bin]
			cmd := exec.Command(bin, flag, lang.script, dir)
			cmd.Stdin = bytes.NewReader(in)
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
			cmd.Stderr = &bytes.Buffer{}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", lang.bin, err, cmd.Stderr)
			}
			var says []bool
			if err := json.Unmarshal(out, &says); err != nil || len(says) != len(cases) {
				t.Fatalf("%s printed %q (%v); want %d answers", lang.bin, out, err, len(cases))
			}
			for i, tc := range cases {
				if says[i] != tc.Want {
					t.Errorf("%s: verify says %v; want %v", tc.Name, says[i], tc.Want)
				}
			}
		})
	}
}

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := tasks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
