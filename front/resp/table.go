package resp

import (
	"slices"
	"strings"
	"time"
)

// The command groups of COMMAND DOCS.
const (
	groupLimiter    = "limiterd"
	groupConnection = "connection"
	groupServer     = "server"
	groupTx         = "transactions"
)

func key(name string) arg             { return arg{name: name, typ: "key"} }
func integer(name string) arg         { return arg{name: name, typ: "integer"} }
func number(name string) arg          { return arg{name: name, typ: "double"} }
func opt(token, name, typ string) arg { return arg{name: name, typ: typ, token: token, optional: true} }
func flag(token string) arg {
	return arg{name: strings.ToLower(token), typ: "pure-token", token: token, optional: true}
}

// commandTable returns a new command table, by lower-case name (new per
// server: the entries hold the server's metric series).
func commandTable() map[string]*command {
	// Arguments shared by the RL.* commands.
	argNS := arg{name: "namespace", typ: "string", token: "NS", optional: true}
	argAtMilli := arg{name: "unix-time-milliseconds", typ: "unix-time", token: "AT", optional: true}
	smyte := func(name string, reduce bool, unit string, run func(string, time.Duration, bool) func(*Server, *call), d time.Duration) *command {
		args := []arg{key("key"), integer("max"), integer("refilltime"), opt("REFILL", "refillamount", "integer")}
		// smyte's counts: 3 to 8 arguments after the name (RL.GET), 3 to
		// 10 (RL.REDUCE), NS and its value not counted.
		max := 9
		summary := "Reads a token bucket (Smyte's): the tokens it holds, taking none; refilltime and AT in " + unit + "."
		flags := []string{"readonly", "fast"}
		if reduce {
			args = append(args, opt("TAKE", "tokens", "integer"))
			max = 11
			summary = "Takes tokens (default 1) from a token bucket (Smyte's) holding up to max, refilled by refillamount (default max) every refilltime " + unit + "; answers the tokens it held before the take (enough: the take was admitted)."
			flags = []string{"write", "fast"}
		}
		args = append(args, arg{name: "timestamp", typ: "unix-time", token: "AT", optional: true}, flag("STRICT"), argNS)
		return &command{name: name, arity: -4, max: max, nsFree: true, flags: flags, group: groupLimiter, summary: summary, args: args, run: run(strings.ToUpper(name), d, reduce)}
	}
	cmds := []*command{
		smyte("rl.reduce", true, "seconds", tokenCmd, time.Second),
		smyte("rl.get", false, "seconds", tokenCmd, time.Second),
		smyte("rl.preduce", true, "milliseconds", tokenCmd, time.Millisecond),
		smyte("rl.pget", false, "milliseconds", tokenCmd, time.Millisecond),
		{name: "rl.incr", arity: -2, max: 10, flags: []string{"write", "fast"}, group: groupLimiter, run: cmdIncr,
			summary: "Counts hits (BY, default 1) of a key in every window size of its namespace, or in WINDOW alone; answers a map of window size to sliding rate after counting.",
			args:    []arg{key("key"), opt("BY", "value", "double"), opt("WINDOW", "milliseconds", "integer"), argAtMilli, argNS}},
		{name: "rl.rate", arity: -2, max: 10, flags: []string{"readonly", "fast"}, group: groupLimiter, run: cmdRate,
			summary: "Reads a key's sliding rates, counting nothing, as if DIFF more were counted now; answers a map of window size to rate.",
			args:    []arg{key("key"), opt("WINDOW", "milliseconds", "integer"), opt("DIFF", "value", "double"), argAtMilli, argNS}},
		{name: "rl.allow", arity: -4, flags: []string{"write", "fast"}, group: groupLimiter, run: cmdAllow,
			summary: "Admits COST hits (default 1) if they fit under every sliding-window limit (at most limit hits per window of window milliseconds, one of the namespace's sizes) and counts them; PENALTY counts them even when refused. Answers allowed, never, limit, remaining, retry_after_ms, reset_after_ms.",
			args:    []arg{key("key"), {name: "window-limit", typ: "block", multiple: true, args: []arg{integer("window"), number("limit")}}, opt("COST", "hits", "double"), flag("PENALTY"), argAtMilli, argNS}},
		{name: "rl.reset", arity: -2, flags: []string{"write", "fast"}, group: groupLimiter, run: cmdReset,
			summary: "Forgets a key's counts in its namespace, on this node and in its store, so that every node of the cluster forgets them by its next sync; needs the admin grant. Without LEASES or a bucket, its sliding-window counts in every window size, answering a map of window size to rate after the reset; else only what it names, answering OK: LEASES frees every lease of the key, TOKEN, LEAKY and FIXED (as RL.PREDUCE, RL.LEAKY and RL.FIXED name them, in milliseconds) start that bucket again as a new one.",
			args: []arg{key("key"), argNS, flag("LEASES"),
				{name: "token", typ: "block", token: "TOKEN", optional: true, multiple: true, args: []arg{number("max"), integer("refill"), opt("REFILL", "amount", "double")}},
				{name: "leaky", typ: "block", token: "LEAKY", optional: true, multiple: true, args: []arg{number("size"), integer("interval")}},
				{name: "fixed", typ: "block", token: "FIXED", optional: true, multiple: true, args: []arg{number("limit"), integer("period")}}}},
		{name: "rl.policy", arity: -3, max: 10, flags: []string{"write", "fast"}, group: groupLimiter, run: cmdPolicy,
			summary: "Admits COST (default 1) if it fits under every limit of policy, one of the namespace's policies held by the server, and counts it; PENALTY counts it even when refused. Answers allowed, never, limit, remaining, retry_after_ms, reset_after_ms; a dry run adds dry_run and would_allow.",
			args:    []arg{key("key"), {name: "policy", typ: "string"}, opt("COST", "hits", "double"), flag("PENALTY"), argAtMilli, argNS}},
		{name: "rl.leaky", arity: -4, max: 13, flags: []string{"write", "fast"}, group: groupLimiter, run: cmdLeaky,
			summary: "Adds TAKE drops (default 1) to a leaky bucket (Sidekiq's) of size drops draining size per interval milliseconds, if they fit; WAIT waits up to that many milliseconds for room. Answers allowed, never, limit, remaining, retry_after_ms, reset_after_ms (the next drip).",
			args:    []arg{key("key"), number("size"), integer("interval"), opt("TAKE", "drops", "double"), opt("WAIT", "milliseconds", "integer"), flag("PENALTY"), argAtMilli, argNS}},
		{name: "rl.fixed", arity: -4, max: 11, flags: []string{"write", "fast"}, group: groupLimiter, run: cmdFixed,
			summary: "Admits TAKE (default 1) if it fits under limit in the current clock-aligned period of period milliseconds (Sidekiq's bucket), and counts it. Answers allowed, never, limit, remaining, retry_after_ms, reset_after_ms (the period's end).",
			args:    []arg{key("key"), number("limit"), integer("period"), opt("TAKE", "hits", "double"), flag("PENALTY"), argAtMilli, argNS}},
		{name: "rl.acquire", arity: -4, max: 6, flags: []string{"write", "fast"}, group: groupLimiter, run: cmdAcquire,
			summary: "Takes one of at most limit concurrent leases of a key, living ttl milliseconds unless released or renewed. Answers acquired, lease (its id, for RL.RELEASE and RL.RENEW at any node), expires_at_ms, held, retry_after_ms.",
			args:    []arg{key("key"), integer("limit"), integer("ttl"), argNS}},
		{name: "rl.release", arity: 2, flags: []string{"write", "fast"}, group: groupLimiter, run: cmdRelease,
			summary: "Releases a lease (its id names its namespace). Answers released (false: unknown, expired or already released, which is harmless) and pending (the store is down; retried).",
			args:    []arg{{name: "lease", typ: "string"}}},
		{name: "rl.renew", arity: 3, flags: []string{"write", "fast"}, group: groupLimiter, run: cmdRenew,
			summary: "Sets a live lease to expire ttl milliseconds from now. Answers renewed and expires_at_ms.",
			args:    []arg{{name: "lease", typ: "string"}, integer("ttl")}},

		{name: "ping", arity: -1, max: 2, flags: []string{"fast"}, group: groupConnection, run: cmdPing,
			summary: "Answers PONG, or the message.", args: []arg{{name: "message", typ: "string", optional: true}}},
		{name: "echo", arity: 2, flags: []string{"fast"}, group: groupConnection, run: cmdEcho,
			summary: "Answers the message.", args: []arg{{name: "message", typ: "string"}}},
		{name: "hello", arity: -1, flags: []string{"fast", "no-auth"}, group: groupConnection, run: cmdHello,
			summary: "Chooses RESP2 or RESP3 and answers the server's properties; AUTH authenticates with a configured token.",
			args:    []arg{{name: "protover", typ: "integer", optional: true}, {name: "username-password", typ: "block", token: "AUTH", optional: true, args: []arg{{name: "username", typ: "string"}, {name: "password", typ: "string"}}}, opt("SETNAME", "clientname", "string")}},
		{name: "auth", arity: -2, max: 3, flags: []string{"fast", "no-auth"}, group: groupConnection, run: cmdAuth,
			summary: "Authenticates the connection with a configured token (refused when none is configured).", args: []arg{{name: "username", typ: "string", optional: true}, {name: "password", typ: "string"}}},
		{name: "client", arity: -2, flags: []string{"fast"}, group: groupConnection, run: cmdClient,
			summary: "CLIENT SETNAME name, GETNAME, SETINFO LIB-NAME|LIB-VER value, ID, INFO.", args: []arg{{name: "subcommand", typ: "string"}}},
		{name: "select", arity: 2, flags: []string{"fast"}, group: groupConnection, run: cmdSelect,
			summary: "Accepts database 0 only: a namespace is an RL.* command's NS argument.", args: []arg{integer("index")}},
		{name: "multi", arity: 1, immediate: true, flags: []string{"fast"}, group: groupTx, run: cmdMulti,
			summary: "Begins a transaction: the next commands are queued until EXEC runs them (in order, not atomically across keys) or DISCARD drops them."},
		{name: "exec", arity: 1, immediate: true, flags: []string{"fast"}, group: groupTx, run: cmdExec,
			summary: "Runs the commands queued since MULTI, in order, and answers their replies as one array; EXECABORT when one could not be queued."},
		{name: "discard", arity: 1, immediate: true, flags: []string{"fast"}, group: groupTx, run: cmdDiscard,
			summary: "Drops the commands queued since MULTI."},
		{name: "watch", arity: -2, immediate: true, flags: []string{"fast"}, group: groupTx, run: cmdWatch,
			summary: "Refused: limiterd holds no keys a client can read, so there is nothing to watch.", args: []arg{{name: "key", typ: "key", multiple: true}}},
		{name: "unwatch", arity: 1, flags: []string{"fast"}, group: groupTx, run: cmdUnwatch,
			summary: "Answers OK: nothing is watched."},
		{name: "quit", arity: -1, immediate: true, flags: []string{"fast"}, group: groupConnection, run: cmdQuit,
			summary: "Answers OK and closes the connection."},
		{name: "command", arity: -1, flags: []string{"loading"}, group: groupServer, run: cmdCommand,
			summary: "COMMAND, COMMAND COUNT, COMMAND LIST, COMMAND INFO [name ...], COMMAND DOCS [name ...]: this table.",
			args:    []arg{{name: "subcommand", typ: "string", optional: true}}},
		{name: "info", arity: -1, flags: []string{"loading"}, group: groupServer, run: cmdInfo,
			summary: "Answers the server, clients, stats and limiterd sections.", args: []arg{{name: "section", typ: "string", optional: true, multiple: true}}},
		{name: "config", arity: -2, flags: []string{"loading"}, group: groupServer, run: cmdConfig,
			summary: "CONFIG GET answers save (\"\") and appendonly (no) only: limiterd is configured by its own file.", args: []arg{{name: "subcommand", typ: "string"}}},
	}
	m := make(map[string]*command, len(cmds))
	for _, c := range cmds {
		m[c.name] = c
	}
	return m
}

// sortedCommands returns the table's commands by name.
func sortedCommands(m map[string]*command) []*command {
	out := make([]*command, 0, len(m))
	for _, c := range m {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *command) int { return strings.Compare(a.name, b.name) })
	return out
}
