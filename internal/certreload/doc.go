// Package certreload serves TLS with a certificate, key and client CA
// bundle read from files, and picks up new files without a restart.
//
// A Reloader holds the current certificate and CA pool. Handshakes ask it
// for a server config (tls.Config.GetConfigForClient); at most once per
// check interval a handshake stats the files, and when one changed (its
// modification time, size or identity, so a rename over it or a swapped
// symlink counts) the files are read again. A new pair that does not load
// — a key that does not match, a half-written file — is logged and the
// old one kept; the next change of a file is tried again. No goroutine
// and no timer: an idle server reads nothing.
//
// Identity turns a verified client certificate (mTLS) into what
// authorization needs: subject common name, DNS and URI names, and the
// SHA-256 of the certificate.
package certreload
