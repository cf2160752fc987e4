// Package auth decides who may call limiterd and what they may do.
//
// A caller is a Principal: a configured bearer token or a client
// certificate identity (mTLS). Each is granted namespaces (by name, or
// "*" for all) and operations:
//
//	read   SlidingWindow in a local namespace: a call that counts and
//	       creates nothing
//	write  Increment, Allow (of cost 0 too), Acquire, Release, Renew, and
//	       SlidingWindow in a syncing namespace: every call that counts
//	       or can create state (a key, a bucket, a store row)
//	admin  the admin operations (none yet)
//
// The fronts find a call's Principal (Authorizer.Token, Authorizer.TLS,
// Authorizer.Request)
// and put it in the call's context (WithPrincipal); package service checks
// it (Authorizer.Authorize) before it counts anything, the one place every
// front's calls pass. Middleware guards an HTTP endpoint that is not about
// one namespace (the admin operations): it needs a grant of "*". The
// package imports nothing of limiterd.
//
// Tokens are kept only as SHA-256 hashes, looked up by hash (so many
// tokens cost one map lookup) and compared in constant time; a token's
// length and bytes leak nothing through timing, and no token is ever part
// of an error or a log line.
package auth
