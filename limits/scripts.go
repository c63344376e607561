package limits

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Call is one script call for Gates.RunScripts: Res and Err are its reply
// (the script must answer an array).
type Call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
	Res    []any
	Err    error
}

// RunScripts runs calls in one pipeline, by their sha (a script Redis does
// not know yet goes again in full, the others are not run twice), and sets
// each one's reply.
func (g *Gates) RunScripts(ctx context.Context, calls []*Call) {
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = c.Script.EvalSha(ctx, p, c.Keys, c.Args...)
		}
		return nil
	})
	var again []int
	for i, cmd := range cmds {
		calls[i].Res, calls[i].Err = cmd.Slice()
		if IsNoScript(calls[i].Err) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	_, _ = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range again {
			cmds[i] = calls[i].Script.Eval(ctx, p, calls[i].Keys, calls[i].Args...)
		}
		return nil
	})
	for _, i := range again {
		calls[i].Res, calls[i].Err = cmds[i].Slice()
	}
}

// IsNoScript reports whether err is Redis refusing a script by sha that it
// does not know (a first call, or after a restart or failover): the
// script did not run, and may be sent again in full.
func IsNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// splitReplies cuts a group script's reply ({length, its reply…, length,
// …}: Admit's and Commit's) into its n replies, each at least least
// long.
func splitReplies(what string, res []any, n, least int) ([][]string, error) {
	r := replyStrings(res)
	out := make([][]string, 0, n)
	for i := 0; i < len(r) && len(out) < n; {
		m, _ := strconv.Atoi(r[i])
		if m < least || i+1+m > len(r) {
			break
		}
		out = append(out, r[i+1:i+1+m])
		i += 1 + m
	}
	if len(out) != n {
		return nil, fmt.Errorf("%s: unexpected reply %v", what, res)
	}
	return out, nil
}
