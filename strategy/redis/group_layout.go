package redis

// The layout of the allowgroup script (clustersync.GroupAllower, the
// store's one Allow script: a single Allow is a group of one), in the
// records of layout.go; TestGroupLayoutHeader keeps its header
// allowgroup_layout.lua in step with this file.

// groupKeys is one window's KEYS of the allowgroup script.
type groupKeys int

const (
	groupKeysCur  groupKeys = iota // the hash of the current window
	groupKeysPrev                  // the hash of the previous window
	groupKeysWidth
)

// groupHead is the head of the allowgroup script's ARGV. After it come
// the windows (one groupWindow each, as many as KEYS name), then the
// entries: one groupEntry each, followed by one limit per window (an
// empty string for none).
type groupHead int

const (
	groupHeadSumField groupHead = iota // the key's sum field
	groupHeadRowField                  // the incarnation's row field of the key
	groupHeadWidth
)

// groupWindow is one window of the allowgroup script's ARGV.
type groupWindow int

const (
	groupWindowSize        groupWindow = iota // the window size
	groupWindowPos                            // At − the current window's start
	groupWindowCurTotal                       // the current total before the group
	groupWindowCurAll                         // the current total with every entry's cost: written exactly when every entry counts
	groupWindowCurVersion                     // the current row's version
	groupWindowCurExpire                      // the current row's expiry
	groupWindowPrevTotal                      // the previous total
	groupWindowPrevVersion                    // the previous row's version
	groupWindowPrevExpire                     // the previous row's expiry
	groupWindowPrevRow                        // the previous row as stored
	groupWindowWidth
)

// groupEntry is the fixed part of one entry of the allowgroup script's
// ARGV; the entry's limits follow it, one per window.
type groupEntry int

const (
	groupEntryCost          groupEntry = iota // the cost
	groupEntryCountRejected                   // '1' to count a denied cost, else '0'
	groupEntryWidth
)

// groupReply is one window's reply of the allowgroup script: the sums and
// the incarnation's totals as stored before the writes. The entries'
// verdicts (1 or 0) follow the windows.
type groupReply int

const (
	groupReplyCurSum groupReply = iota
	groupReplyCurOwn
	groupReplyPrevSum
	groupReplyPrevOwn
	groupReplyWidth
)

func (f groupKeys) at(i int) int   { return i*int(groupKeysWidth) + int(f) }
func (f groupWindow) at(i int) int { return int(groupHeadWidth) + i*int(groupWindowWidth) + int(f) }
func (f groupReply) at(i int) int  { return i*int(groupReplyWidth) + int(f) }

// groupEntryAt is where field f of entry i is, for nw windows; its limit
// of window w is at groupEntryWidth.entryAt(nw, i) + w.
func (f groupEntry) entryAt(nw, i int) int {
	return groupWindowWidth.at(nw-1) + i*(int(groupEntryWidth)+nw) + int(f)
}
