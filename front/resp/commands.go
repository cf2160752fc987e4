package resp

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/limiterd/limiterd/auth"
)

// command is one entry of the command table: what COMMAND reports of it
// and the function that runs it.
type command struct {
	name  string // lower case, as COMMAND reports it
	arity int    // Redis's: n exactly n arguments, -n at least n (the name counted)
	max   int    // the most arguments, the name counted (0: no bound)
	// nsFree: an NS option and its value are not counted in arity and
	// max (smyte's commands, whose counts are smyte's).
	nsFree bool
	// immediate: run at once inside MULTI rather than queued (Redis's
	// MULTI, EXEC, DISCARD, WATCH, QUIT).
	immediate bool
	flags     []string
	group     string
	// summary and args are COMMAND DOCS's.
	summary string
	args    []arg
	run     func(s *Server, x *call)
	// id indexes the command's counts in a session (2·id ok, 2·id+1
	// error); ok and failed are its metric series.
	id         int
	ok, failed counter
}

// arg documents one argument for COMMAND DOCS; a "block" has its parts
// in args (redis-cli reads them to build its hints).
type arg struct {
	name, typ, token   string
	optional, multiple bool
	args               []arg
}

// call is one command being run.
type call struct {
	ctx  context.Context
	sess *session
	args [][]byte
	w    *reply
}

// maxCommandName is the longest command name looked up; longer ones are
// unknown.
const maxCommandName = 32

// exec runs one command, writing its reply to sess.w.
func (s *Server) exec(ctx context.Context, sess *session, args [][]byte) {
	if sess.counts == nil {
		sess.counts = make([]uint64, 2*len(s.byID)+1)
	}
	w := &sess.w
	w.resp3 = sess.resp3
	if len(args) == 0 {
		return // the parser gives no empty command; a fuzzer may
	}
	cmd := s.lookup(args[0])
	if cmd == nil {
		sess.counts[len(sess.counts)-1]++
		var b strings.Builder
		fmt.Fprintf(&b, "ERR unknown command '%s', with args beginning with: ", clip(args[0]))
		for _, a := range args[1:min(len(args), 4)] {
			fmt.Fprintf(&b, "'%s' ", clip(a))
		}
		w.error(b.String())
		if sess.tx != nil {
			sess.tx.flagged = true
		}
		return
	}
	errs := w.errors
	switch {
	case !cmd.arityOK(args) && cmd.name == "exec":
		// Redis's answer to an EXEC it refuses, in MULTI or not.
		w.error("EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command")
		sess.tx = nil
	case !cmd.arityOK(args):
		w.error("ERR wrong number of arguments for '" + cmd.name + "' command")
		if sess.tx != nil {
			sess.tx.flagged = true
		}
	case sess.tx != nil && !cmd.immediate:
		s.queue(sess, args)
		if w.errors == errs {
			return // counted when EXEC runs it
		}
	default:
		x := &sess.scratch.call
		*x = call{ctx: ctx, sess: sess, args: args, w: w}
		cmd.run(s, x)
		*x = call{} // holds nothing of the command once it is done
	}
	if w.errors != errs {
		sess.counts[2*cmd.id+1]++
		if w.internal != nil {
			// A bug, or a store answering what it should not: the client
			// sees only the reply. The key is logged at debug only.
			s.logInternal(ctx, cmd.name, args, w.internal)
			w.internal = nil
		}
	} else {
		sess.counts[2*cmd.id]++
	}
}

// arityOK reports whether args (the name first) are as many as the
// command takes.
func (c *command) arityOK(args [][]byte) bool {
	n := len(args)
	if c.nsFree {
		// The first NS after the key, with its value. Only the key may
		// be the word NS: the other arguments are integers, or option
		// names and values.
		for i := 2; i+1 < n; i++ {
			if eqFold(args[i], "NS") {
				n -= 2
				break
			}
		}
	}
	return (c.arity <= 0 || n == c.arity) && (c.arity >= 0 || n >= -c.arity) && (c.max == 0 || n <= c.max)
}

// flush adds a session's counts to the metrics and zeroes them: once
// per pipeline, rather than two shared atomic adds per command.
func (s *Server) flush(sess *session) {
	var total uint64
	for i, n := range sess.counts {
		if n == 0 {
			continue
		}
		total += n
		sess.counts[i] = 0
		switch {
		case i == len(sess.counts)-1:
			s.m.unknown.Add(float64(n))
		case i%2 == 0:
			s.byID[i/2].ok.Add(float64(n))
		default:
			s.byID[i/2].failed.Add(float64(n))
		}
	}
	s.commands.Add(total)
}

// unflushed is the commands the session ran since its last flush.
func (sess *session) unflushed() uint64 {
	var n uint64
	for _, c := range sess.counts {
		n += c
	}
	return n
}

// lookup finds a command by name, in any case, without allocating.
func (s *Server) lookup(name []byte) *command {
	if len(name) > maxCommandName {
		return nil
	}
	var buf [maxCommandName]byte
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return s.cmds[string(buf[:len(name)])]
}

// clip is an argument as an error message may quote it: at most 64
// bytes, printable.
func clip(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	return strings.Map(func(r rune) rune {
		if r == '\'' || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, string(b))
}

// eqFold reports whether b is the keyword kw (upper case) in any case.
func eqFold(b []byte, kw string) bool {
	if len(b) != len(kw) {
		return false
	}
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != kw[i] {
			return false
		}
	}
	return true
}

// The connection commands.

func cmdPing(s *Server, x *call) {
	switch len(x.args) {
	case 1:
		x.w.simple("PONG")
	case 2:
		x.w.bulkBytes(x.args[1])
	default:
		x.w.error("ERR wrong number of arguments for 'ping' command")
	}
}

func cmdEcho(s *Server, x *call) { x.w.bulkBytes(x.args[1]) }

// errNoAuth is AUTH's answer: limiterd has no access tokens to check.
const errNoAuth = "ERR AUTH: no access tokens are configured on this limiterd, so there is no password to check; connect without one"

// errWrongPass is AUTH's answer to a token that is not configured, as
// Redis answers a wrong password.
const errWrongPass = "WRONGPASS invalid username-password pair or user is disabled."

// cmdAuth is AUTH <token> or AUTH <username> <token>; the username, when
// given, must be the token's name (or "default", as clients send).
func cmdAuth(s *Server, x *call) {
	if s.cfg.Authorizer == nil {
		x.w.error(errNoAuth)
		return
	}
	user, token := []byte(nil), x.args[1]
	if len(x.args) == 3 {
		user, token = x.args[1], x.args[2]
	}
	if !s.login(x.sess, user, token) {
		x.w.error(errWrongPass)
		return
	}
	x.w.simple("OK")
}

// login makes token's principal the session's, when token is configured
// and user (when given) names it; else the session keeps what it had.
func (s *Server) login(sess *session, user, token []byte) bool {
	p := s.cfg.Authorizer.Token(string(token))
	if p == nil || (user != nil && string(user) != p.Name() && string(user) != "default") {
		return false
	}
	sess.ctx = auth.WithPrincipal(s.ctx, p)
	return true
}

func cmdHello(s *Server, x *call) {
	a := x.args
	resp3 := x.sess.resp3
	if len(a) > 1 {
		v, ok := parseDigits(a[1])
		if !ok || (v != 2 && v != 3) {
			x.w.error("NOPROTO unsupported protocol version; limiterd speaks RESP2 and RESP3 (HELLO 2 or HELLO 3)")
			return
		}
		resp3 = v == 3
	}
	name, setName := "", false
	for i := 2; i < len(a); {
		switch {
		case eqFold(a[i], "AUTH") && i+2 < len(a):
			if s.cfg.Authorizer == nil {
				x.w.error(errNoAuth)
				return
			}
			if !s.login(x.sess, a[i+1], a[i+2]) {
				x.w.error(errWrongPass)
				return
			}
			i += 3
		case eqFold(a[i], "SETNAME") && i+1 < len(a):
			if !validName(a[i+1]) {
				x.w.error(errClientName)
				return
			}
			name, setName = string(a[i+1]), true
			i += 2
		default:
			x.w.error("ERR syntax error in HELLO option '" + clip(a[i]) + "'")
			return
		}
	}
	x.sess.resp3 = resp3
	x.w.resp3 = resp3
	if setName {
		x.sess.name = name
	}
	w := x.w
	w.mapHeader(7)
	w.bulk("server")
	w.bulk("limiterd")
	w.bulk("version")
	w.bulk(s.cfg.Version)
	w.bulk("proto")
	if resp3 {
		w.int(3)
	} else {
		w.int(2)
	}
	w.bulk("id")
	w.int(x.sess.id)
	w.bulk("mode")
	w.bulk("standalone")
	w.bulk("role")
	w.bulk("master")
	w.bulk("modules")
	w.array(0)
}

const errClientName = "ERR Client names cannot contain spaces, newlines or special characters, nor be longer than 256 bytes."

// validName reports whether b may name a client (Redis's rule: no
// spaces, newlines or other special characters), at most 256 bytes.
func validName(b []byte) bool {
	if len(b) > 256 {
		return false
	}
	for _, c := range b {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

func cmdClient(s *Server, x *call) {
	a := x.args
	sub := a[1]
	switch {
	case eqFold(sub, "SETNAME") && len(a) == 3:
		if !validName(a[2]) {
			x.w.error(errClientName)
			return
		}
		x.sess.name = string(a[2])
		x.w.simple("OK")
	case eqFold(sub, "GETNAME") && len(a) == 2:
		if x.sess.name == "" {
			x.w.null()
		} else {
			x.w.bulk(x.sess.name)
		}
	case eqFold(sub, "SETINFO") && len(a) == 4:
		if !validName(a[3]) {
			x.w.error("ERR " + clip(a[2]) + " cannot contain spaces, newlines or special characters.")
			return
		}
		switch {
		case eqFold(a[2], "LIB-NAME"):
			x.sess.libName = string(a[3])
		case eqFold(a[2], "LIB-VER"):
			x.sess.libVer = string(a[3])
		default:
			x.w.error("ERR Unrecognized option '" + clip(a[2]) + "'")
			return
		}
		x.w.simple("OK")
	case eqFold(sub, "ID") && len(a) == 2:
		x.w.int(x.sess.id)
	case eqFold(sub, "INFO") && len(a) == 2:
		x.w.verbatim(fmt.Sprintf("id=%d name=%s lib-name=%s lib-ver=%s resp=%d\n", x.sess.id, x.sess.name, x.sess.libName, x.sess.libVer, map[bool]int{false: 2, true: 3}[x.sess.resp3]))
	default:
		x.w.error("ERR unknown subcommand or wrong number of arguments for 'CLIENT|" + clip(sub) + "'; limiterd knows SETNAME, GETNAME, SETINFO, ID and INFO")
	}
}

func cmdSelect(s *Server, x *call) {
	if v, ok := parseDigits(x.args[1]); ok && v == 0 {
		x.w.simple("OK")
		return
	}
	x.w.error("ERR DB index is out of range: limiterd has one database, 0; a namespace is the NS argument of an RL.* command")
}

func cmdQuit(s *Server, x *call) {
	x.w.simple("OK")
	x.sess.quit = true
}

// cmdConfig answers CONFIG GET for Redis's persistence settings, which
// benchmark tools ask for: limiterd saves nothing to disk (save "",
// appendonly no). Other parameters are not answered: limiterd is
// configured by its own file.
func cmdConfig(s *Server, x *call) {
	if !eqFold(x.args[1], "GET") || len(x.args) < 3 {
		x.w.error("ERR limiterd supports only CONFIG GET (of save and appendonly); it is configured by its own file")
		return
	}
	var pairs [][2]string
	for _, p := range x.args[2:] {
		switch {
		case eqFold(p, "SAVE"):
			pairs = append(pairs, [2]string{"save", ""})
		case eqFold(p, "APPENDONLY"):
			pairs = append(pairs, [2]string{"appendonly", "no"})
		}
	}
	x.w.mapHeader(len(pairs))
	for _, p := range pairs {
		x.w.bulk(p[0])
		x.w.bulk(p[1])
	}
}

func cmdInfo(s *Server, x *call) {
	// INFO names the namespaces and counts the clients: for
	// authenticated connections only, as Redis has it.
	if s.cfg.Authorizer != nil && x.sess.ctx == nil {
		x.w.error(errNoAuthReply)
		return
	}
	s.mu.Lock()
	clients := len(s.conns)
	s.mu.Unlock()
	var names []string
	for _, ns := range s.svc.Namespaces() {
		names = append(names, ns.Name)
	}
	var b strings.Builder
	b.WriteString("# Server\r\n")
	// The Redis version whose protocol limiterd speaks (RESP2, RESP3,
	// HELLO), for clients that check it.
	b.WriteString("redis_version:7.0.0\r\n")
	fmt.Fprintf(&b, "limiterd_version:%s\r\n", s.cfg.Version)
	b.WriteString("redis_mode:standalone\r\n")
	fmt.Fprintf(&b, "uptime_in_seconds:%d\r\n", int64(time.Since(s.started)/time.Second))
	b.WriteString("\r\n# Clients\r\n")
	fmt.Fprintf(&b, "connected_clients:%d\r\n", clients)
	fmt.Fprintf(&b, "maxclients:%d\r\n", s.cfg.MaxClients)
	b.WriteString("\r\n# Stats\r\n")
	fmt.Fprintf(&b, "total_commands_processed:%d\r\n", s.commands.Load()+x.sess.unflushed())
	b.WriteString("\r\n# Limiterd\r\n")
	fmt.Fprintf(&b, "namespaces:%d\r\n", len(names))
	fmt.Fprintf(&b, "namespace_names:%s\r\n", strings.Join(names, ","))
	fmt.Fprintf(&b, "max_command_size:%d\r\n", s.cfg.MaxCommandSize)
	x.w.verbatim(b.String())
}

func cmdCommand(s *Server, x *call) {
	a := x.args
	if len(a) == 1 {
		x.w.array(len(s.cmds))
		for _, c := range sortedCommands(s.cmds) {
			writeInfo(x.w, c)
		}
		return
	}
	sub := a[1]
	switch {
	case eqFold(sub, "COUNT") && len(a) == 2:
		x.w.int(int64(len(s.cmds)))
	case eqFold(sub, "LIST") && len(a) == 2:
		cs := sortedCommands(s.cmds)
		x.w.array(len(cs))
		for _, c := range cs {
			x.w.bulk(c.name)
		}
	case eqFold(sub, "INFO"):
		cs := s.named(a[2:])
		x.w.array(len(cs))
		for _, c := range cs {
			if c == nil {
				x.w.null()
			} else {
				writeInfo(x.w, c)
			}
		}
	case eqFold(sub, "DOCS"):
		var cs []*command
		for _, c := range s.named(a[2:]) {
			if c != nil {
				cs = append(cs, c)
			}
		}
		x.w.mapHeader(len(cs))
		for _, c := range cs {
			x.w.bulk(c.name)
			writeDocs(x.w, c)
		}
	default:
		x.w.error("ERR unknown subcommand '" + clip(sub) + "'; limiterd knows COMMAND COUNT, DOCS, INFO and LIST")
	}
}

// named returns the commands called names (nil for an unknown one), or
// every command when names is empty.
func (s *Server) named(names [][]byte) []*command {
	if len(names) == 0 {
		return sortedCommands(s.cmds)
	}
	out := make([]*command, len(names))
	for i, n := range names {
		out[i] = s.lookup(n)
	}
	return out
}

// writeInfo writes COMMAND INFO's entry of c (Redis 7's ten fields).
func writeInfo(w *reply, c *command) {
	w.array(10)
	w.bulk(c.name)
	w.int(int64(c.arity))
	w.array(len(c.flags))
	for _, f := range c.flags {
		w.simple(f)
	}
	if c.group == groupLimiter && c.args[0].typ == "key" {
		w.int(1)
		w.int(1)
		w.int(1)
	} else {
		w.int(0)
		w.int(0)
		w.int(0)
	}
	w.array(0) // ACL categories
	w.array(0) // tips
	w.array(0) // key specs
	w.array(0) // subcommands
}

// writeDocs writes COMMAND DOCS's entry of c.
func writeDocs(w *reply, c *command) {
	w.mapHeader(5)
	w.bulk("summary")
	w.bulk(c.summary)
	w.bulk("since")
	w.bulk("1.0.0")
	w.bulk("group")
	w.bulk(c.group)
	w.bulk("complexity")
	w.bulk("O(1)")
	w.bulk("arguments")
	writeArgs(w, c.args)
}

// writeArgs writes COMMAND DOCS's arguments.
func writeArgs(w *reply, args []arg) {
	w.array(len(args))
	for _, a := range args {
		n := 2
		if len(a.args) > 0 {
			n++
		}
		if a.token != "" {
			n++
		}
		if a.optional || a.multiple {
			n++
		}
		w.mapHeader(n)
		w.bulk("name")
		w.bulk(a.name)
		w.bulk("type")
		w.bulk(a.typ)
		if a.token != "" {
			w.bulk("token")
			w.bulk(a.token)
		}
		if len(a.args) > 0 {
			w.bulk("arguments")
			writeArgs(w, a.args)
		}
		if a.optional || a.multiple {
			var flags []string
			if a.optional {
				flags = append(flags, "optional")
			}
			if a.multiple {
				flags = append(flags, "multiple")
			}
			w.bulk("flags")
			w.array(len(flags))
			for _, f := range flags {
				w.simple(f)
			}
		}
	}
}

// itoa is strconv.Itoa for int64.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
