package redis

// The argument and reply layouts of the scripts, defined here once.
//
// Each script's KEYS, ARGV and reply is a head record followed by one
// record per item (row, window or limit). A record is a named int type;
// its constants, from iota, are its fields in order, and the last one,
// <record>Width, is its length. The encoders index by these constants;
// `go generate` writes the same names, in Lua's style and 1-based (field
// pushRowTotal is PUSH_ROW_TOTAL = 3), into each script's *_layout.lua
// header, and TestLayoutHeaders fails while a header differs from what
// this file generates.

//go:generate go test -run ^TestLayoutHeaders$ -update .

// pushHead is the head of the push script's ARGV.
type pushHead int

const (
	pushHeadRowPrefix pushHead = iota // the incarnation's row prefix
	pushHeadReply                     // '1' for a reply per row (rowReply), '0' for only the number of rows
	pushHeadWidth
)

// pushGroup heads a group of the push script's rows: consecutive rows
// of one hash with one version and one expiry, as a tick's rows of one
// window are. The group's rows (pushRow) follow it; the hashes are the
// script's KEYS. Sending the version and expiry once per group rather
// than once per row saves the server two arguments of every row.
type pushGroup int

const (
	pushGroupHash    pushGroup = iota // the index of the rows' hash in KEYS, 1-based
	pushGroupRows                     // the number of rows in the group
	pushGroupVersion                  // the rows' version
	pushGroupExpire                   // the rows' expiry, Unix ms (0 for none)
	pushGroupWidth
)

// pushRow is one row of a push group.
type pushRow int

const (
	pushRowKey   pushRow = iota // the key
	pushRowTotal                // the total
	pushRowWidth
)

// rowReply is one row's reply of the push and key scripts: the key's
// sum and the incarnation's total, as stored before the write.
type rowReply int

const (
	rowReplySum rowReply = iota
	rowReplyOwn
	rowReplyWidth
)

// keyHead is the head of the key script's ARGV; its KEYS are the
// windows' hashes, one per window.
type keyHead int

const (
	keyHeadSumField keyHead = iota // the key's sum field
	keyHeadRowField                // the incarnation's row field of the key
	keyHeadWidth
)

// keyWindow is one window of the key script's ARGV.
type keyWindow int

const (
	keyWindowRow     keyWindow = iota // the row as stored: "<total>:<version>:<expiry>"
	keyWindowTotal                    // its total
	keyWindowVersion                  // its version
	keyWindowExpire                   // its expiry
	keyWindowWidth
)

// The buckets script decides a clustersync.BucketStore call (token,
// leaky and fixed buckets; not the key buckets of keys.go). Its KEYS are
// the buckets' hashes, one per call, all of one hash tag.

// bucketsHead is the head of the buckets script's ARGV.
type bucketsHead int

const (
	bucketsHeadIncField bucketsHead = iota // the incarnation's field: its row prefix
	bucketsHeadAt                          // the take's time, Unix ns
	bucketsHeadTake                        // the take, micro-hits (0: only sync)
	bucketsHeadWidth
)

// bucketsCall is one call (one bucket) of the buckets script's ARGV.
// Numbers are decimal int64; what Lua could not compute exactly or
// cheaply comes precomputed.
type bucketsCall int

const (
	bucketsCallKind       bucketsCall = iota // 't', 'l' or 'f'
	bucketsCallA                             // token max, leaky size, fixed period (ratelimit.BucketSpec.A)
	bucketsCallB                             // token refill time, leaky interval, fixed limit
	bucketsCallC                             // token refill amount, leaky drip, fixed 0
	bucketsCallStrict                        // '1' for a strict token take, else '0'
	bucketsCallInitLevel                     // a new row's state: BucketSpec.Init's level
	bucketsCallInitMark                      // and mark
	bucketsCallForceAt                       // when a catch-up applies: max(ApplyAt, 0)
	bucketsCallForceStart                    // a fixed bucket's period start at ForceAt
	bucketsCallAtStart                       // a fixed bucket's period start at the take's time
	bucketsCallLife                          // the caller's life of the bucket
	bucketsCallTotal                         // the caller's total in that life
	bucketsCallVersion                       // the call's version
	bucketsCallExpire                        // the row's expiry, Unix ms (0 for none)
	bucketsCallReset                         // '1' for a reset (BucketCall.Reset), else '0'
	bucketsCallResetLevel                    // a reset's new state: BucketSpec.Init(at)'s level
	bucketsCallResetMark                     // and mark
	bucketsCallWidth
)

// bucketsReplyHead is the head of the buckets script's reply.
type bucketsReplyHead int

const (
	bucketsReplyHeadAllowed bucketsReplyHead = iota // '1' or '0'
	bucketsReplyHeadWidth
)

// bucketsReply is one bucket's reply of the buckets script, as decimal
// strings: clustersync.BucketReply.
type bucketsReply int

const (
	bucketsReplyBeforeLevel bucketsReply = iota
	bucketsReplyBeforeMark
	bucketsReplyAfterLevel
	bucketsReplyAfterMark
	bucketsReplyBeforeWaste
	bucketsReplyAfterWaste
	bucketsReplyApplied
	bucketsReplySeq
	bucketsReplyWidth
)

// The leases script applies the ops of one (namespace, key) of a
// clustersync.LeaseStore call (see leases.go). Times go as 16 hexadecimal
// digits that sort as the int64s do (leaseTime), so Lua compares and
// orders them exactly as strings.

// leasesKeys is the leases script's KEYS.
type leasesKeys int

const (
	leasesKeysSet   leasesKeys = iota // the sorted set of live and released ids, by time
	leasesKeysIndex                   // the hash of each id's times
	leasesKeysWidth
)

// leasesHead is the head of the leases script's ARGV.
type leasesHead int

const (
	leasesHeadNow   leasesHead = iota // now, as a leaseTime
	leasesHeadAfter                   // now + 1, as a leaseTime ('g' past the last)
	leasesHeadWidth
)

// leasesOp is one op of the leases script's ARGV.
type leasesOp int

const (
	leasesOpKind     leasesOp = iota // 'a' acquire, 'p' put, 'r' release, 'n' renew, 'c' count, 'x' clear
	leasesOpLease                    // the lease's id
	leasesOpLimit                    // the limit of an acquire, decimal
	leasesOpExpiry                   // the expiry (until, for a release), as a leaseTime
	leasesOpExpireAt                 // the expiry in Unix ms, rounded up: the keys' PEXPIREAT
	leasesOpWidth
)

// leasesReply is one op's reply of the leases script.
type leasesReply int

const (
	leasesReplyGranted leasesReply = iota // the reply's OK: 1 or 0
	leasesReplyHeld                       // the live leases after the op
	leasesReplyNext                       // the earliest expiry among them as a leaseTime, '' for none
	leasesReplyWidth
)

// Where field f of item i is, 0-based.
func (f rowReply) at(i int) int    { return i*int(rowReplyWidth) + int(f) }
func (f keyWindow) at(i int) int   { return int(keyHeadWidth) + i*int(keyWindowWidth) + int(f) }
func (f bucketsCall) at(i int) int { return int(bucketsHeadWidth) + i*int(bucketsCallWidth) + int(f) }
func (f leasesOp) at(i int) int    { return int(leasesHeadWidth) + i*int(leasesOpWidth) + int(f) }
func (f leasesReply) at(i int) int { return i*int(leasesReplyWidth) + int(f) }
func (f bucketsReply) at(i int) int {
	return int(bucketsReplyHeadWidth) + i*int(bucketsReplyWidth) + int(f)
}

// The changes script reads change logs (lib.lua): its KEYS are the logs,
// of one hash tag on a cluster, any on a single server.

// changesHead is the head of the changes script's ARGV.
type changesHead int

const (
	changesHeadLimit changesHead = iota // the most members to read per log; -1 for all
	changesHeadOwn                      // the reader's row prefix: members of its own writes are read but not returned
	changesHeadWidth
)

// changesLog is one log's part of the changes script's ARGV.
type changesLog int

const (
	changesLogSince changesLog = iota // the sequence to read after; "" for only the last one
	changesLogWidth
)

// changesReplyHead starts one log's part of the changes script's reply,
// followed by Count members.
type changesReplyHead int

const (
	changesReplyHeadKnown changesReplyHead = iota // '1', or '0' when the log cannot answer for the sequence
	changesReplyHeadNext                          // the sequence to read after next
	changesReplyHeadMore                          // '1' when the limit cut the read
	changesReplyHeadCount                         // the members that follow (the reader's own writes left out)
	changesReplyHeadWidth
)

// changesReply is one member of the changes script's reply.
type changesReply int

const (
	changesReplyMember changesReply = iota // "<writer's row prefix><size>:<start>:<key>"
	changesReplySeq                        // its sequence
	changesReplyWidth
)
