// Package envoyfront serves Envoy's global rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over a
// service.Service: limiterd as a drop-in for envoyproxy/ratelimit, with
// sliding windows instead of fixed ones.
//
// Rules come from envoyproxy/ratelimit's YAML domain files, read from one
// directory (Config.Dir) as its loader reads them: a domain, descriptors
// nested by key and optional value (a "*" anywhere in a value matches any
// run of bytes), and per descriptor a rate_limit (unit second to year;
// requests_per_unit; unlimited; name; replaces), shadow_mode, quota_mode,
// detailed_metric, value_to_metric, share_threshold and metadata (accepted,
// unused). Every file its loader refuses is refused, with the file, line
// and field (RulesError); a domain split over files loads only with
// Config.MergeDomainConfig. Matching follows envoyproxy/ratelimit: a
// request descriptor's entries walk the tree level by level, key and value
// first, then the first wildcard value that matches, then the key alone,
// and the limit of the node reached by the last entry applies.
//
// Mapping: every descriptor limit is a sliding-window limit of one
// limiterd namespace (Config.Namespace), whose window sizes must include
// the size of each unit used (1s, 1m, 1h, 24h, 168h, 720h, 8760h; checked
// at load). The counter's key is the domain and the request's entries,
// each string length-prefixed ("<len>:<bytes>"), so distinct descriptors
// never share a counter, except the values of a share_threshold wildcard,
// which count in the wildcard's; the limit's unit is not part of the key,
// so a reload that changes a limit keeps its counts. A request's
// descriptors are decided one by one (one service.Allow each), as
// envoyproxy/ratelimit counts each of them; the overall code is OVER_LIMIT
// when any descriptor is, but quota_mode descriptors only when all of them
// are.
//
// A front only translates: the counting and its exactness are the
// service's and its namespace's (local, periodic or synchronous).
//
// The rules are reloaded by Reload (the daemon polls the directory with
// Watch); a file that does not load keeps the last good rules, logs why
// and counts a failed reload. Counts live in the namespace, so a reload
// loses none.
package envoyfront
