package cli

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hooklane/hooklane/web"
)

// Usage lists the operator commands.
const Usage = `operator commands (over the API at $HOOKLANE_URL, default http://127.0.0.1:$PORT, with $HOOKLANE_API_TOKEN;
each may start with --tenant NAME: that tenant's subscribers, events and dead letters, not the default tenant's):
  hooklane publish -type T [-id ID] [-data JSON|@file] [-to SUBSCRIBER] [-not-before RFC3339|+DURATION]
  hooklane publish -file FILE|-   (events as POST /v1/events takes them, each with its id: a JSON array or one object per line; sent 100 a call, each 429 or 503 waited out)
  hooklane subscribers list
  hooklane subscribers get|status|delete|pause|resume|end-cooldown ID
  hooklane subscribers put ID -url URL [-events a,b.*] [-rate N -burst N -period 1s] [-max-in-flight N] [-max-attempts N] [-secret whsec_…] [-metrics]
  hooklane subscribers rotate ID [-grace 24h]
  hooklane deliveries list SUBSCRIBER [-state S] [-since T] [-until T] [-limit N] [-cursor C]
  hooklane deliveries get|resend SUBSCRIBER EVENT_ID
  hooklane events get EVENT_ID
  hooklane dead-letters list [-subscriber ID] [-limit N]
  hooklane dead-letters replay -subscriber ID | -id TASK_ID [-id …] | -all  [-since T] [-until T]`

// ErrUsage is returned for a command line Run does not understand.
var ErrUsage = errors.New("usage")

// IsCLICommand reports whether CLI handles the command name.
func IsCommand(name string) bool {
	return name == "publish" || name == "subscribers" || name == "dead-letters" || name == "deliveries" || name == "events"
}

// Run runs an operator command (see Usage) and writes the API's answer
// to stdout as JSON. getenv reads HOOKLANE_URL, PORT and HOOKLANE_API_TOKEN.
func Run(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	return RunWith(ctx, FromEnv(getenv), args, stdout)
}

// FromEnv returns the Client of the API at HOOKLANE_URL (default
// http://127.0.0.1:$PORT, PORT default 8080) with HOOKLANE_API_TOKEN.
func FromEnv(getenv func(string) string) *Client {
	base := getenv("HOOKLANE_URL")
	if base == "" {
		base = "http://127.0.0.1:" + cmp.Or(getenv("PORT"), "8080")
	}
	return NewClient(base, getenv("HOOKLANE_API_TOKEN"))
}

// RunWith is Run through c.
func RunWith(ctx context.Context, c *Client, args []string, stdout io.Writer) error {
	return RunIO(ctx, c, args, os.Stdin, stdout)
}

// RunIO is RunWith reading stdin for publish -file -.
func RunIO(ctx context.Context, c *Client, args []string, stdin io.Reader, stdout io.Writer) error {
	out := func(v any, err error) error {
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	if len(args) > 0 {
		if _, name, ok := strings.Cut(args[0], "="); ok && (strings.HasPrefix(args[0], "--tenant=") || strings.HasPrefix(args[0], "-tenant=")) {
			c.Tenant, args = name, args[1:]
		} else if (args[0] == "--tenant" || args[0] == "-tenant") && len(args) > 1 {
			c.Tenant, args = args[1], args[2:]
		}
	}
	if len(args) == 0 {
		return ErrUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "publish":
		if slices.ContainsFunc(rest, func(a string) bool {
			return a == "-file" || a == "--file" || strings.HasPrefix(a, "-file=") || strings.HasPrefix(a, "--file=")
		}) {
			return publishFile(ctx, c, rest, stdin, stdout)
		}
		ev, err := parsePublish(rest)
		if err != nil {
			return err
		}
		return out(c.Publish(ctx, ev))
	case "subscribers":
		return subscribersCLI(ctx, c, rest, out)
	case "dead-letters":
		return deadLettersCLI(ctx, c, rest, out)
	case "deliveries":
		return deliveriesCLI(ctx, c, rest, out)
	case "events":
		if len(rest) != 2 || rest[0] != "get" {
			return fmt.Errorf("%w: events: want get EVENT_ID", ErrUsage)
		}
		return out(c.Event(ctx, rest[1]))
	}
	return ErrUsage
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors come back as values, printed once by main
	return fs
}

func parsePublish(args []string) (web.EventRequest, error) {
	fs := newFlags("publish")
	id := fs.String("id", "", "event id; default a new random one (give your own to make retries idempotent)")
	typ := fs.String("type", "", "event type")
	data := fs.String("data", "null", "JSON data, or @file")
	to := fs.String("to", "", "send to this subscriber only")
	nb := fs.String("not-before", "", "RFC 3339 time or +duration")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return web.EventRequest{}, fmt.Errorf("%w: publish: %v", ErrUsage, cmp.Or(err, errors.New("unexpected arguments")))
	}
	ev := web.EventRequest{ID: *id, Type: *typ, SubscriberID: *to, Data: json.RawMessage(*data)}
	if ev.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		ev.ID = "evt_" + hex.EncodeToString(b[:])
	}
	what := "-data"
	if name, ok := strings.CutPrefix(*data, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return ev, fmt.Errorf("%w: publish: -data @%s: %v", ErrUsage, name, err)
		}
		ev.Data, what = b, "-data @"+name
	}
	if err := isJSON(what, ev.Data); err != nil {
		return ev, err
	}
	if *nb != "" {
		var t time.Time
		if d, ok := strings.CutPrefix(*nb, "+"); ok {
			dur, err := time.ParseDuration(d)
			if err != nil {
				return ev, fmt.Errorf("%w: publish: -not-before: want +duration such as +90s or +24h, or an RFC 3339 time such as 2026-12-02T15:04:05Z; got %q", ErrUsage, *nb)
			}
			t = time.Now().Add(dur)
		} else {
			var err error
			if t, err = time.Parse(time.RFC3339Nano, *nb); err != nil {
				return ev, fmt.Errorf("%w: publish: -not-before: want an RFC 3339 time such as 2026-12-02T15:04:05Z, or +duration such as +90s; got %q", ErrUsage, *nb)
			}
		}
		ev.NotBefore = &t
	}
	return ev, nil
}

// isJSON says in words why data, given by what (a flag, a file), is not
// one JSON value: encoding/json would otherwise refuse to send it, naming
// its own RawMessage type.
func isJSON(what string, data []byte) error {
	it := "it"
	if strings.Contains(what, "@") {
		it = "the file"
	}
	var syn *json.SyntaxError
	switch err := json.Unmarshal(data, new(json.RawMessage)); {
	case err == nil:
		return nil
	case len(bytes.TrimSpace(data)) == 0:
		return fmt.Errorf("%w: publish: %s is not valid JSON: %s is empty", ErrUsage, what, it)
	case errors.As(err, &syn) && syn.Error() == "unexpected end of JSON input":
		return fmt.Errorf("%w: publish: %s is not valid JSON: %s ends inside a value", ErrUsage, what, it)
	case errors.As(err, &syn):
		return fmt.Errorf("%w: publish: %s is not valid JSON: %s at byte %d", ErrUsage, what, syn.Error(), syn.Offset)
	default:
		return fmt.Errorf("%w: publish: %s is not valid JSON", ErrUsage, what)
	}
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func subscribersCLI(ctx context.Context, c *Client, args []string, out func(any, error) error) error {
	if len(args) == 1 && args[0] == "list" {
		return out(c.ListSubscribers(ctx))
	}
	if len(args) < 2 {
		return fmt.Errorf("%w: subscribers: want list, or a command and an id", ErrUsage)
	}
	cmd, id, rest := args[0], args[1], args[2:]
	if cmd != "put" && cmd != "rotate" && len(rest) > 0 {
		return fmt.Errorf("%w: subscribers %s takes only an id", ErrUsage, cmd)
	}
	switch cmd {
	case "get":
		return out(c.GetSubscriber(ctx, id))
	case "status":
		return out(c.Status(ctx, id))
	case "delete":
		return out(map[string]string{"deleted": id}, c.DeleteSubscriber(ctx, id))
	case "pause", "resume":
		return out(c.SetPaused(ctx, id, cmd == "pause"))
	case "end-cooldown":
		return out(c.EndCooldown(ctx, id))
	case "rotate":
		fs := newFlags("rotate")
		grace := fs.String("grace", "", "how long the old secret keeps signing (default 24h; 0s: stop now)")
		if err := fs.Parse(rest); err != nil || fs.NArg() != 0 {
			return fmt.Errorf("%w: subscribers rotate: %v", ErrUsage, cmp.Or(err, errors.New("unexpected arguments")))
		}
		return out(c.RotateSecret(ctx, id, *grace))
	case "put":
		fs := newFlags("put")
		u := fs.String("url", "", "endpoint URL")
		events := fs.String("events", "", "comma-separated event types or prefix.*; empty: all")
		rate := fs.Int("rate", 0, "requests per period (with -burst and -period; default 10/s, burst 20)")
		burst := fs.Int("burst", 0, "burst")
		period := fs.String("period", "1s", "period of the rate")
		inflight := fs.Int("max-in-flight", 0, "concurrent requests (default 10)")
		attempts := fs.Int("max-attempts", 0, "counted attempts before dead-lettering (default 8)")
		metrics := fs.Bool("metrics", false, "series of its own in /metrics (the operator's few to watch)")
		var secrets stringList
		fs.Var(&secrets, "secret", "whsec_ secret (repeatable); default: keep, or generate for a new subscriber")
		if err := fs.Parse(rest); err != nil || fs.NArg() != 0 {
			return fmt.Errorf("%w: subscribers put: %v", ErrUsage, cmp.Or(err, errors.New("unexpected arguments")))
		}
		r := web.SubscriberRequest{URL: *u, MaxAttempts: *attempts, Secrets: secrets, Metrics: web.StrictBool(*metrics)}
		if *events != "" {
			r.EventTypes = strings.Split(*events, ",")
		}
		// A flag given is sent as given, 0 included, and the API refuses
		// what it refuses: the defaults are the API's, for flags left out.
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "rate", "burst", "period":
				r.RateLimit = &web.RateLimit{Rate: *rate, Burst: cmp.Or(*burst, *rate), Period: *period}
			case "max-in-flight":
				r.MaxInFlight = inflight
			}
		})
		return out(c.PutSubscriber(ctx, id, r))
	}
	return fmt.Errorf("%w: subscribers %s", ErrUsage, cmd)
}

func deadLettersCLI(ctx context.Context, c *Client, args []string, out func(any, error) error) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: dead-letters: want list or replay", ErrUsage)
	}
	fs := newFlags("dead-letters")
	sub := fs.String("subscriber", "", "subscriber id")
	switch args[0] {
	case "list":
		limit := fs.Int("limit", 0, "at most this many (default 100)")
		cursor := fs.String("cursor", "", "the next_cursor of the page before, to go on")
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 0 {
			return fmt.Errorf("%w: dead-letters list: %v", ErrUsage, cmp.Or(err, errors.New("unexpected arguments")))
		}
		return out(c.DeadLetters(ctx, *sub, *limit, *cursor))
	case "replay":
		var ids stringList
		fs.Var(&ids, "id", "task id <subscriber>:<event> (repeatable)")
		all := fs.Bool("all", false, "replay every dead letter")
		since := fs.String("since", "", "only those dead at or after this RFC 3339 time")
		until := fs.String("until", "", "only those dead before this RFC 3339 time")
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 0 {
			return fmt.Errorf("%w: dead-letters replay: %v", ErrUsage, cmp.Or(err, errors.New("unexpected arguments")))
		}
		req := web.ReplayRequest{Subscriber: *sub, IDs: ids, All: *all}
		for _, f := range []struct {
			name, v string
			dst     *time.Time
		}{{"since", *since, &req.Since}, {"until", *until, &req.Until}} {
			if f.v == "" {
				continue
			}
			t, err := time.Parse(time.RFC3339, f.v)
			if err != nil {
				return fmt.Errorf("%w: dead-letters replay: -%s: want an RFC 3339 time such as 2026-11-29T08:00:00Z, got %q", ErrUsage, f.name, f.v)
			}
			*f.dst = t
		}
		return out(c.ReplayAll(ctx, req))
	}
	return fmt.Errorf("%w: dead-letters %s", ErrUsage, args[0])
}

func deliveriesCLI(ctx context.Context, c *Client, args []string, out func(any, error) error) error {
	if len(args) < 2 {
		return fmt.Errorf("%w: deliveries: want list SUBSCRIBER, or get|resend SUBSCRIBER EVENT_ID", ErrUsage)
	}
	cmd, sub, rest := args[0], args[1], args[2:]
	switch cmd {
	case "list":
		fs := newFlags("deliveries list")
		var q DeliveryQuery
		fs.StringVar(&q.State, "state", "", "only this state: scheduled, pending, in_flight, retrying, cooling, held, delivered, dead")
		fs.StringVar(&q.Since, "since", "", "published at or after this RFC 3339 time")
		fs.StringVar(&q.Until, "until", "", "published before this RFC 3339 time")
		fs.StringVar(&q.Cursor, "cursor", "", "the next_cursor of the page before, to go on")
		fs.IntVar(&q.Limit, "limit", 0, "at most this many (default 100)")
		if err := fs.Parse(rest); err != nil || fs.NArg() != 0 {
			return fmt.Errorf("%w: deliveries list: %v", ErrUsage, cmp.Or(err, errors.New("unexpected arguments")))
		}
		return out(c.Deliveries(ctx, sub, q))
	case "get", "resend":
		if len(rest) != 1 {
			return fmt.Errorf("%w: deliveries %s: want SUBSCRIBER EVENT_ID", ErrUsage, cmd)
		}
		if cmd == "get" {
			return out(c.Delivery(ctx, sub, rest[0]))
		}
		return out(c.Resend(ctx, sub, rest[0]))
	}
	return fmt.Errorf("%w: deliveries %s", ErrUsage, cmd)
}
