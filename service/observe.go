package service

// Front is the front a call came through, as an Observer sees it.
type Front uint8

// The fronts.
const (
	FrontNone Front = iota
	FrontGRPC
	FrontHTTP
	FrontRESP
	FrontEnvoy
)

var frontNames = [...]string{FrontNone: "none", FrontGRPC: "grpc", FrontHTTP: "http", FrontRESP: "resp", FrontEnvoy: "envoy"}

// String is the front's name: grpc, http, resp or envoy.
func (f Front) String() string {
	if int(f) < len(frontNames) {
		return frontNames[f]
	}
	return "unknown"
}

// Observed is one decision: an Allow (each item of a batch on its own) or
// an Acquire that the service decided. Calls that fail decide nothing.
type Observed struct {
	Front Front
	// Namespace is the namespace that decided ("default" for a call that
	// named none).
	Namespace string
	// Kind is the limits' kind, MixedKind when an Allow checks several;
	// ConcurrencyKind for an Acquire.
	Kind Kind
	// Allowed is the limits' answer (a lease granted, for an Acquire);
	// Never says that waiting cannot help. In a dry run (DryRun) it is
	// what the limits decided, though the call was admitted.
	Allowed, Never bool
	// DryRun is set for an Allow decided in shadow mode: admitted
	// whatever Allowed says.
	DryRun bool
	// Cost is what the call asked to take (1 for an Acquire).
	Cost float64
}

// Observer is told of every decision once, on the calling goroutine, so
// that a front's request metrics need not read its requests and answers
// again. It must be safe for concurrent use, and fast.
type Observer interface {
	Decided(Observed)
}

// Observe returns a Service serving the same node and syncers for front:
// it reports each decision of its calls to o (nil: to none).
func (s *Service) Observe(front Front, o Observer) *Service {
	c := *s
	c.front, c.obs = front, o
	return &c
}
