package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/web"
)

// publishFile is publish -file FILE|-: the events of a file (or stdin),
// each as the body of POST /v1/events, as a JSON array or one JSON object
// after another (JSON Lines), sent producer.MaxBatch to a call (POST
// /v1/events/batch). Each event carries its id: the file sent again
// publishes nothing twice (what was booked answers duplicate), which is
// how a run stopped by an error is finished. A batch refused with a
// Retry-After (the token's rate, the web process' places) waits it out and
// goes again (publishWaiting). It writes every call's results as one
// answer, in file order.
func publishFile(ctx context.Context, c *Client, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlags("publish")
	name := fs.String("file", "", "file of events, - for stdin")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || *name == "" {
		return fmt.Errorf("%w: publish -file FILE|-: %v", ErrUsage, cmpErr(err, "no other flag or argument with -file"))
	}
	in := stdin
	if *name != "-" {
		f, err := os.Open(*name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	events, err := readEvents(in)
	if err != nil {
		return fmt.Errorf("publish -file %s: %w", *name, err)
	}
	all := web.BatchAnswer{Results: []web.BatchItem{}}
	write := func() error {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(all)
	}
	for from := 0; from < len(events); from += producer.MaxBatch {
		to := min(from+producer.MaxBatch, len(events))
		ans, err := publishWaiting(ctx, c, events[from:to])
		if err != nil {
			_ = write() // what was answered before
			return fmt.Errorf("events %d to %d of %d: %w (the %d before were answered; sending the file again is safe)",
				from+1, to, len(events), err, from)
		}
		all.Results = append(all.Results, ans.Results...)
		all.Failed += ans.Failed
	}
	return write()
}

// publishWaiting sends one batch, and sends it again after the
// Retry-After of a 429 or 503 (past the token's rate or the web process'
// places, nothing written; or Redis gone, what was booked answering
// duplicate when sent again), up to retryTries calls, each wait at most a
// minute: a file longer than the token's burst goes at the token's rate.
func publishWaiting(ctx context.Context, c *Client, events []json.RawMessage) (web.BatchAnswer, error) {
	for try := 1; ; try++ {
		ans, err := c.PublishBatch(ctx, events)
		var ae *web.APIError
		if err == nil || try == retryTries || !errors.As(err, &ae) || ae.RetryAfter <= 0 ||
			ae.Status != http.StatusTooManyRequests && ae.Status != http.StatusServiceUnavailable {
			return ans, err
		}
		select {
		case <-ctx.Done():
			return ans, errors.Join(err, ctx.Err())
		case <-time.After(min(ae.RetryAfter, time.Minute)):
		}
	}
}

// retryTries is how many times publish -file sends one batch told to wait.
const retryTries = 10

// readEvents reads a JSON array of events, or JSON values one after
// another (JSON Lines), each kept as sent.
func readEvents(r io.Reader) ([]json.RawMessage, error) {
	br := bufio.NewReader(r)
	for {
		b, err := br.Peek(1)
		if err != nil {
			return nil, errors.New("no events: want a JSON array of events or one JSON object per line")
		}
		if !bytes.ContainsAny(b, " \t\r\n") {
			break
		}
		_, _ = br.ReadByte()
	}
	dec := json.NewDecoder(br)
	if b, _ := br.Peek(1); b[0] == '[' {
		var events []json.RawMessage
		if err := dec.Decode(&events); err != nil {
			return nil, fmt.Errorf("the JSON array: %w", err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, errors.New("data after the JSON array")
		}
		return events, nil
	}
	var events []json.RawMessage
	for n := 1; ; n++ {
		var ev json.RawMessage
		err := dec.Decode(&ev)
		if err == io.EOF {
			return events, nil
		}
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", n, err)
		}
		events = append(events, ev)
	}
}

func cmpErr(err error, otherwise string) error {
	if err != nil {
		return err
	}
	return errors.New(otherwise)
}
