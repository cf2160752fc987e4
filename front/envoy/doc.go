// Package envoyfront serves Envoy's global rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over a
// service.Service: limiterd as a drop-in for envoyproxy/ratelimit, with
// sliding windows instead of fixed ones.
//
// Rules come from envoyproxy/ratelimit's YAML domain files, read as they
// are from one directory (Config.Dir): a domain, descriptors nested by key
// and optional value (a trailing "*" in a value matches by prefix), and per
// descriptor a rate_limit (unit second, minute, hour or day;
// requests_per_unit; unlimited; name; replaces), shadow_mode and
// detailed_metric. Matching follows envoyproxy/ratelimit: a request
// descriptor's entries walk the tree level by level, key and value first,
// then a wildcard value, then the key alone, and the limit of the node
// reached by the last entry applies.
//
// Mapping: every descriptor limit is a sliding-window limit of one
// limiterd namespace (Config.Namespace), whose window sizes must include
// the size of each unit used (1s, 1m, 1h, 24h; checked at load). The
// counter's key is the domain and the request's entries, each string
// length-prefixed ("<len>:<bytes>"), so distinct descriptors never share a
// counter; the limit's unit is not part of the key, so a reload that
// changes a limit keeps its counts. A request's descriptors are decided
// one by one (one service.Allow each), as envoyproxy/ratelimit counts each
// of them; the overall code is OVER_LIMIT when any descriptor is.
//
// A front only translates: the counting and its exactness are the
// service's and its namespace's (local, periodic or synchronous).
//
// The rules are reloaded by Reload (the daemon polls the directory with
// Watch); a file that does not load keeps the last good rules, logs why
// and counts a failed reload. Counts live in the namespace, so a reload
// loses none.
package envoyfront
