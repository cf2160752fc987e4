package limiterv1

import "unicode/utf8"

// The ValidUTF8 methods give the vtprotobuf fast path
// (limiter_vtproto.pb.go) the check google.golang.org/protobuf makes on
// every proto3 string field and vtprotobuf leaves out: internal/grpccodec
// hands a message with a string that is not valid UTF-8 to
// google.golang.org/protobuf, which refuses it. Fields of google.rpc.Status
// need none: vtprotobuf encodes and decodes that message with
// google.golang.org/protobuf. TestValidUTF8Complete fails when a string
// field of limiter.proto is not covered here.

// ValidUTF8 reports whether the namespace and key are valid UTF-8.
func (x *IncrementRequest) ValidUTF8() bool {
	return utf8.ValidString(x.GetNamespace()) && utf8.ValidString(x.GetKey())
}

// ValidUTF8 reports whether the namespace and key are valid UTF-8.
func (x *SlidingWindowRequest) ValidUTF8() bool {
	return utf8.ValidString(x.GetNamespace()) && utf8.ValidString(x.GetKey())
}

// ValidUTF8 reports whether the namespace, key and policy are valid UTF-8.
func (x *AllowRequest) ValidUTF8() bool {
	return utf8.ValidString(x.GetNamespace()) && utf8.ValidString(x.GetKey()) && utf8.ValidString(x.GetPolicy())
}

// ValidUTF8 reports whether the namespace and key are valid UTF-8.
func (x *ResetRequest) ValidUTF8() bool {
	return utf8.ValidString(x.GetNamespace()) && utf8.ValidString(x.GetKey())
}

// ValidUTF8 reports whether the reason is valid UTF-8.
func (x *AllowResponse) ValidUTF8() bool {
	return utf8.ValidString(x.GetReason())
}

// ValidUTF8 reports whether every item's strings are valid UTF-8.
func (x *IncrementBatchRequest) ValidUTF8() bool { return allValid(x.GetItems()) }

// ValidUTF8 reports whether every item's strings are valid UTF-8.
func (x *AllowBatchRequest) ValidUTF8() bool { return allValid(x.GetItems()) }

// ValidUTF8 reports whether the response's strings are valid UTF-8.
func (x *AllowResult) ValidUTF8() bool {
	return x.GetResponse().ValidUTF8()
}

// ValidUTF8 reports whether every result's strings are valid UTF-8.
func (x *AllowBatchResponse) ValidUTF8() bool { return allValid(x.GetResults()) }

// ValidUTF8 reports whether the namespace and key are valid UTF-8.
func (x *AcquireRequest) ValidUTF8() bool {
	return utf8.ValidString(x.GetNamespace()) && utf8.ValidString(x.GetKey())
}

// ValidUTF8 reports whether the lease is valid UTF-8.
func (x *AcquireResponse) ValidUTF8() bool { return utf8.ValidString(x.GetLease()) }

// ValidUTF8 reports whether the lease is valid UTF-8.
func (x *ReleaseRequest) ValidUTF8() bool { return utf8.ValidString(x.GetLease()) }

// ValidUTF8 reports whether the lease is valid UTF-8.
func (x *RenewRequest) ValidUTF8() bool { return utf8.ValidString(x.GetLease()) }

// ValidUTF8 reports whether the response's strings are valid UTF-8.
func (x *AcquireResult) ValidUTF8() bool { return x.GetResponse().ValidUTF8() }

// ValidUTF8 reports whether every item's strings are valid UTF-8.
func (x *AcquireBatchRequest) ValidUTF8() bool { return allValid(x.GetItems()) }

// ValidUTF8 reports whether every result's strings are valid UTF-8.
func (x *AcquireBatchResponse) ValidUTF8() bool { return allValid(x.GetResults()) }

// ValidUTF8 reports whether every item's strings are valid UTF-8.
func (x *ReleaseBatchRequest) ValidUTF8() bool { return allValid(x.GetItems()) }

// ValidUTF8 reports whether every item's strings are valid UTF-8.
func (x *RenewBatchRequest) ValidUTF8() bool { return allValid(x.GetItems()) }

// allValid reports whether every message's strings are valid UTF-8.
func allValid[M interface{ ValidUTF8() bool }](ms []M) bool {
	for _, m := range ms {
		if !m.ValidUTF8() {
			return false
		}
	}
	return true
}
