package certreload

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
)

// Identity is who a client proved to be with a certificate that verified
// against the client CA pool.
type Identity struct {
	// CommonName is the subject's CN.
	CommonName string
	// DNSNames and URIs are the subject alternative names.
	DNSNames []string
	URIs     []string
	// SHA256 is the lowercase hex SHA-256 of the certificate's DER: it
	// names one certificate exactly (a pin), where the names survive
	// a reissue.
	SHA256 string
}

// PeerIdentity returns the identity of a connection's verified client
// certificate; false when there is none (no TLS, no certificate, or one
// that was not verified). Fronts reach the connection state through
// credentials.TLSInfo.State (gRPC, from peer.FromContext),
// http.Request.TLS and (*tls.Conn).ConnectionState.
func PeerIdentity(cs *tls.ConnectionState) (Identity, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Identity{}, false
	}
	leaf := cs.VerifiedChains[0][0]
	sum := sha256.Sum256(leaf.Raw)
	id := Identity{CommonName: leaf.Subject.CommonName, DNSNames: leaf.DNSNames, SHA256: hex.EncodeToString(sum[:])}
	for _, u := range leaf.URIs {
		id.URIs = append(id.URIs, u.String())
	}
	return id, true
}
