package ratelimit

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"regexp"
	"unicode/utf8"
)

// namespaceName is the form of a namespace's name.
var namespaceName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ValidNamespace reports whether name is a namespace's name: 1 to 64
// letters, digits, '_', '.' or '-'.
func ValidNamespace(name string) bool { return namespaceName.MatchString(name) }

// ErrInvalidLease is wrapped by the error of a lease id that is not one
// limiterd made, or names another namespace than its call.
var ErrInvalidLease = errors.New("ratelimit: invalid lease")

// LeaseID is what a lease id carries: its namespace and key, the table
// (holder) that granted it, a serial unique in that table and a secret
// drawn at random for the lease. The serials are sequential, so a caller
// holding one lease knows the serials of the others; the secret is what
// it cannot guess: a release or renewal needs the lease's own (the table
// and the stores keep it with the lease, as part of its store id), so an id
// changed to carry another lease's serial names no lease.
type LeaseID struct {
	Namespace, Key         string
	Holder, Serial, Secret uint64
}

// leaseIDVersion is the format of String. Version 1 had no secret: such
// an id is refused (ErrInvalidLease); its lease expires at its TTL.
const leaseIDVersion = 2

// leaseIDHead is the fixed part of an encoded id: version, holder, serial
// and secret.
const leaseIDHead = 1 + 3*8

// String encodes id as the opaque lease a caller holds (URL-safe base64).
func (id LeaseID) String() string {
	b := make([]byte, 0, leaseIDHead+binary.MaxVarintLen64+len(id.Namespace)+len(id.Key))
	b = append(b, leaseIDVersion)
	b = binary.BigEndian.AppendUint64(b, id.Holder)
	b = binary.BigEndian.AppendUint64(b, id.Serial)
	b = binary.BigEndian.AppendUint64(b, id.Secret)
	b = binary.AppendUvarint(b, uint64(len(id.Namespace)))
	b = append(b, id.Namespace...)
	b = append(b, id.Key...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseLeaseID decodes a lease as String made it; an error is a
// *FieldError on "lease" wrapping ErrInvalidLease.
func ParseLeaseID(s string) (LeaseID, error) {
	bad := func(why string) (LeaseID, error) {
		return LeaseID{}, fieldErr("lease", ErrInvalidLease, "not a lease limiterd granted: %s", why)
	}
	if s == "" {
		return bad("empty")
	}
	if len(s) > 2*MaxKeyLen {
		return bad("too long")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return bad("not URL-safe base64")
	}
	if len(b) < leaseIDHead+1 || b[0] != leaseIDVersion {
		return bad("unknown format")
	}
	id := LeaseID{Holder: binary.BigEndian.Uint64(b[1:9]), Serial: binary.BigEndian.Uint64(b[9:17]),
		Secret: binary.BigEndian.Uint64(b[17:25])}
	n, w := binary.Uvarint(b[leaseIDHead:])
	rest := b[leaseIDHead+max(w, 0):]
	if w <= 0 || n > uint64(len(rest)) {
		return bad("truncated")
	}
	id.Namespace, id.Key = string(rest[:n]), string(rest[n:])
	if !namespaceName.MatchString(id.Namespace) || id.Key == "" || len(id.Key) > MaxKeyLen || !utf8.ValidString(id.Key) {
		return bad("malformed namespace or key")
	}
	return id, nil
}

// LeaseGrant is the answer of an acquisition.
type LeaseGrant struct {
	// OK reports whether a lease was granted: ID, until Expiry.
	OK     bool
	ID     LeaseID
	Expiry int64
	// Held is the key's leases held after the call, as this node knows
	// them; Next the earliest expiry among them (0: none or unknown).
	Held, Next int64
}
