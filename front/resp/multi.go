package resp

import "fmt"

// Transactions: MULTI, EXEC, DISCARD, as Redis answers them. After
// MULTI, a command is queued (+QUEUED) rather than run, unless it cannot
// be: an unknown command or a wrong number of arguments is answered with
// its error and makes EXEC answer EXECABORT. EXEC runs the queue in
// order and answers the replies as one array. It is not atomic: each
// command is one call of the service, and another connection's calls may
// come between them. WATCH is refused: limiterd holds no keys a client
// can read, so there is nothing to watch.

// transaction is the commands queued since MULTI.
type transaction struct {
	buf  []byte // the queued arguments, end to end
	ends []int  // where each argument ends in buf
	argc []int  // each command's number of arguments
	// flagged: a command could not be queued; EXEC answers EXECABORT.
	flagged bool
	// overflow is the error of a queue that outgrew its caps: the queue
	// is dropped, and every command until EXEC or DISCARD gets it.
	overflow string
}

// errExecAbort is EXEC's answer to a transaction flagged by an error.
const errExecAbort = "EXECABORT Transaction discarded because of previous errors."

// queue queues a command of sess's transaction and answers +QUEUED, or
// the error that discards the transaction when the queue would outgrow
// Config.MaxQueuedCommands or Config.MaxQueuedBytes.
func (s *Server) queue(sess *session, args [][]byte) {
	tx, w := sess.tx, &sess.w
	if tx.overflow != "" {
		w.error(tx.overflow)
		return
	}
	size := 0
	for _, a := range args {
		size += len(a) + queuedArgOverhead
	}
	switch {
	case len(tx.argc) >= s.cfg.MaxQueuedCommands:
		tx.overflow = fmt.Sprintf("ERR transaction discarded: more than %d commands queued; send EXEC sooner", s.cfg.MaxQueuedCommands)
	case len(tx.buf)+len(tx.ends)*queuedArgOverhead+size > s.cfg.MaxQueuedBytes:
		tx.overflow = fmt.Sprintf("ERR transaction discarded: its queued commands exceed %d bytes; send EXEC sooner", s.cfg.MaxQueuedBytes)
	}
	if tx.overflow != "" {
		*tx = transaction{flagged: true, overflow: tx.overflow}
		w.error(tx.overflow)
		return
	}
	for _, a := range args {
		tx.buf = append(tx.buf, a...)
		tx.ends = append(tx.ends, len(tx.buf))
	}
	tx.argc = append(tx.argc, len(args))
	w.simple("QUEUED")
}

// queuedArgOverhead is what a queued argument costs beside its bytes
// (its end in transaction.ends), counted against MaxQueuedBytes.
const queuedArgOverhead = 8

func cmdMulti(s *Server, x *call) {
	switch {
	case x.sess.tx != nil:
		x.w.error("ERR MULTI calls can not be nested")
	case s.cfg.Authorizer != nil && x.sess.ctx == nil:
		x.w.error(errNoAuthReply)
	default:
		x.sess.tx = &transaction{}
		x.w.simple("OK")
	}
}

func cmdDiscard(s *Server, x *call) {
	if x.sess.tx == nil {
		x.w.error("ERR DISCARD without MULTI")
		return
	}
	x.sess.tx = nil
	x.w.simple("OK")
}

// cmdExec runs the queued commands in order, each as if sent alone (with
// the connection's principal and protocol when it runs), and answers
// their replies as one array.
func cmdExec(s *Server, x *call) {
	sess, w := x.sess, x.w // x is reused by the commands run
	tx := sess.tx
	if tx == nil {
		w.error("ERR EXEC without MULTI")
		return
	}
	sess.tx = nil
	if tx.flagged {
		w.error(errExecAbort)
		return
	}
	errs := w.errors
	w.array(len(tx.argc))
	var args [][]byte
	start, k := 0, 0
	for _, n := range tx.argc {
		args = args[:0]
		for range n {
			end := tx.ends[k]
			args = append(args, tx.buf[start:end:end])
			start = end
			k++
		}
		ctx := s.ctx
		if sess.ctx != nil {
			ctx = sess.ctx
		}
		s.exec(ctx, sess, args)
	}
	// EXEC itself succeeded: its commands' errors are theirs, counted
	// as they ran.
	w.errors = errs
}

func cmdWatch(s *Server, x *call) {
	if x.sess.tx != nil {
		x.w.error("ERR WATCH inside MULTI is not allowed")
		return
	}
	x.w.error("ERR WATCH is not supported: limiterd holds no keys a client can read, so there is nothing to watch; send MULTI ... EXEC without it")
}

// cmdUnwatch answers OK, as Redis does with nothing watched (clients
// send it when they reset a transaction).
func cmdUnwatch(s *Server, x *call) { x.w.simple("OK") }
