// Package resp is limiterd's Redis protocol front: redis-cli and every
// Redis client speak to limiterd, as Smyte's rate limiter let them. It is
// a command table over a pipelining server of its own (conn.go: the
// grammar and errors of github.com/tidwall/redcon, which it used before,
// parsed in place); each command decodes its arguments, makes one call to
// package service and encodes the answer.
//
// Smyte's commands, as smyte/ratelimit defines them (refilltime and AT in
// seconds; RL.PREDUCE and RL.PGET take milliseconds):
//
//	RL.REDUCE key max refilltime [REFILL refillamount] [TAKE tokens] [AT timestamp] [STRICT] [NS namespace]
//	RL.GET    key max refilltime [REFILL refillamount] [AT timestamp] [NS namespace]
//
// answer the tokens the bucket held before the take (an integer). They
// take smyte's argument counts (3 to 8 after the name for RL.GET and
// RL.PGET, 3 to 10 for RL.REDUCE and RL.PREDUCE; NS and its value not
// counted), beyond which they answer Redis's wrong-number error. The
// other kinds, in the same style (durations in milliseconds, AT in Unix
// milliseconds, amounts may be fractional):
//
//	RL.INCR    key [BY value] [WINDOW ms] [AT ms] [NS namespace]          map of window size to rate
//	RL.RATE    key [WINDOW ms] [DIFF value] [AT ms] [NS namespace]        map of window size to rate
//	RL.ALLOW   key window limit [window limit ...] [COST n] [PENALTY] [AT ms] [NS namespace]
//	RL.LEAKY   key size interval [TAKE n] [WAIT ms] [PENALTY] [AT ms] [NS namespace]
//	RL.FIXED   key limit period [TAKE n] [PENALTY] [AT ms] [NS namespace]
//	RL.ACQUIRE key limit ttl [NS namespace]
//	RL.RELEASE lease
//	RL.RENEW   lease ttl
//
// RL.ALLOW, RL.LEAKY and RL.FIXED answer a map: allowed, never, limit,
// remaining, retry_after_ms, reset_after_ms. Every RL.* command counts in
// the namespace "default" unless NS names another (RL.RELEASE and
// RL.RENEW take none: a lease id names its namespace). SELECT is not a
// namespace: clients send SELECT on their own, so only SELECT 0 is
// accepted. Maps are RESP3 maps after HELLO 3, else flat arrays of
// key, value, as Redis answers HGETALL; doubles are RESP3 doubles or
// bulk strings; booleans RESP3 booleans or 1 and 0.
//
// The connection commands real clients send are served: PING, ECHO,
// HELLO 2|3 [AUTH username token], AUTH [username] token, CLIENT
// SETNAME/GETNAME/SETINFO/ID/INFO, COMMAND (COUNT, LIST, INFO, DOCS),
// SELECT 0, QUIT, INFO, CONFIG GET (save and appendonly only); MULTI,
// EXEC and DISCARD as Redis answers them (see multi.go; EXEC is not
// atomic), WATCH refused.
//
// With Config.Authorizer, a connection's principal is the token of its
// last successful AUTH (the username, when given, must be the token's
// name or "default"; a wrong token answers WRONGPASS), else its TLS
// client certificate. An RL.* command without a principal answers NOAUTH,
// one not granted answers NOPERM naming the namespace and operation; INFO
// answers NOAUTH too, the other connection commands need none. Without an
// authorizer AUTH is refused.
//
// Hostile input costs bounded memory: a frame guard reads ahead of
// the parser and refuses a command over Config.MaxCommandSize (an
// error reply, then the connection is closed); a command whose bytes stop
// arriving closes its connection after Config.CommandTimeout; replies
// are written whenever Config.MaxPendingReplies accumulate, each write
// within Config.WriteTimeout; at most Config.MaxClients connections are
// served.
// Error replies begin with a code (see writeErr) and name the argument
// that was wrong, as the gRPC front's INVALID_ARGUMENT names its field;
// a syntax error says what was wrong after "ERR syntax error: ".
package resp
