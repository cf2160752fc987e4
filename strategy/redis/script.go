package redis

import (
	"context"
	"embed"

	"github.com/redis/go-redis/v9"
)

// The scripts, each its generated layout header (see layout.go), then
// lib.lua, then its own body. On a cluster or ring every call takes only
// keys of one hash tag (see Store), so each is valid on Redis Cluster.
var (
	pushScript    = newScript("push")
	keyScript     = newScript("key")
	bucketsScript = newScript("buckets")
	leasesScript  = newScript("leases")
	changesScript = newScript("changes")
)

//go:embed *.lua
var lua embed.FS

func newScript(name string) *redis.Script {
	var src []byte
	for _, f := range []string{name + "_layout.lua", "lib.lua", name + ".lua"} {
		b, err := lua.ReadFile(f)
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		src = append(src, b...)
	}
	return redis.NewScript(string(src))
}

// runScripts runs sc once per call in one pipeline, as sc.Run runs one
// call: EVALSHA, then EVAL (which also caches the script on that server)
// for the calls that met NOSCRIPT, in a second pipeline. It returns the
// first error of any call.
func runScripts(ctx context.Context, c Client, sc *redis.Script, calls []scriptCall) error {
	pipe := c.Pipeline()
	for i := range calls {
		calls[i].cmd = sc.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A connection failure may leave the commands without an error of
		// their own (go-redis sets none once its retries are exhausted).
		return err
	}
	retry := c.Pipeline()
	for i := range calls {
		if redis.HasErrorPrefix(calls[i].cmd.Err(), "NOSCRIPT") {
			calls[i].cmd = sc.Eval(ctx, retry, calls[i].keys, calls[i].args...)
		}
	}
	if retry.Len() > 0 {
		if _, err := retry.Exec(ctx); err != nil {
			return err
		}
	}
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// scriptCall is one call of a script.
type scriptCall struct {
	keys []string
	args []any
	cmd  *redis.Cmd
}

// scripter is a redis.Scripter that sends each command by the Client's
// Process, without a pipeline: what sc.Run needs for a synchronous call.
type scripter struct{ c Client }

func (s scripter) eval(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for i := range keys {
		if i == 0 {
			a = append(a, keys[0]) // a string: a cluster client routes by it
		} else {
			a = append(a, &keys[i])
		}
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = s.c.Process(ctx, cmd)
	return cmd
}

func (s scripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "eval", script, keys, args)
}

func (s scripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "evalsha", sha, keys, args)
}

func (s scripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "eval_ro", script, keys, args)
}

func (s scripter) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "evalsha_ro", sha, keys, args)
}

func (s scripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	a := []any{"script", "exists"}
	for _, h := range hashes {
		a = append(a, h)
	}
	cmd := redis.NewBoolSliceCmd(ctx, a...)
	_ = s.c.Process(ctx, cmd)
	return cmd
}

func (s scripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx, "script", "load", script)
	_ = s.c.Process(ctx, cmd)
	return cmd
}
